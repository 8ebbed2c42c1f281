// Where an error points in the request text: the service names a place in
// its body either as a byte offset (invalid_json: "... (byte 22)") or as a
// JSON Pointer (invalid_request's field, "/w_v/1"). These turn either into
// a range of the request box's text, so the page can select it.

// The index in text (UTF-16, as a textarea holds it) of UTF-8 byte `byte`
// of the same text.
export function index_of_byte(text, byte) {
  let b = 0;
  let i = 0;
  while (i < text.length && b < byte) {
    const c = text.codePointAt(i);
    b += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    i += c > 0xffff ? 2 : 1;
  }
  return i;
}

const BLANK = /[ \t\n\r]/;

function skip_blanks(text, i) {
  while (i < text.length && BLANK.test(text[i])) i++;
  return i;
}

// The index after the closing quote of the string whose opening quote is
// at i.
function string_end(text, i) {
  let j = i + 1;
  while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
  return j + 1;
}

// The end of the JSON value that starts at i (text is valid JSON).
function value_end(text, i) {
  const c = text[i];
  if (c === '"') return string_end(text, i);
  if (c !== '{' && c !== '[') {
    let j = i;
    while (j < text.length && !/[,\]} \t\n\r]/.test(text[j])) j++;
    return j;
  }
  let depth = 0;
  for (let j = i; j < text.length; j++) {
    if (text[j] === '"') {
      j = string_end(text, j) - 1;
    } else if (text[j] === '{' || text[j] === '[') {
      depth++;
    } else if (text[j] === '}' || text[j] === ']') {
      if (--depth === 0) return j + 1;
    }
  }
  return text.length;
}

// The start of member `key` of the object at i, or of element `key` of the
// array at i; -1 when there is none.
function child_start(text, i, key) {
  const object = text[i] === '{';
  let j = skip_blanks(text, i + 1);
  for (let n = 0; j < text.length && text[j] !== '}' && text[j] !== ']'; n++) {
    let name = String(n);
    if (object) {
      const end = string_end(text, j);
      name = JSON.parse(text.slice(j, end));
      j = skip_blanks(text, skip_blanks(text, end) + 1); // past the colon
    }
    if (name === key) return j;
    j = skip_blanks(text, value_end(text, j));
    if (text[j] === ',') j = skip_blanks(text, j + 1);
  }
  return -1;
}

// [start, end) of the value that pointer names in text (valid JSON), or of
// the deepest one on its way that text has; null for text that is not an
// object or array.
export function locate(text, pointer) {
  let at = skip_blanks(text, 0);
  if (text[at] !== '{' && text[at] !== '[') return null;
  const keys = pointer.split('/').slice(1).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
  for (const key of keys) {
    if (text[at] !== '{' && text[at] !== '[') break;
    const next = child_start(text, at, key);
    if (next < 0) break;
    at = next;
  }
  return [at, value_end(text, at)];
}
