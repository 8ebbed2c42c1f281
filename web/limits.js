// limits.js: the service's limits, a request the page can tell is over
// one before building it, and a 413's flag said in words a user can act
// on.
//
// At load the page asks the service for the limits it applies (GET
// /limits, load_limits) and says they are this server's. Until it has
// them, or when the service does not answer (an older attnd: 404), the
// page assumes the defaults of docs/operations.md and says so. A 413 names
// the limit it applied and its value; from then on the page uses that
// value, as this server's, whatever it had before.

const DEFAULTS = {
  '--max-body-bytes': 67108864,
  '--max-map-elems': 16777216,
  '--max-dim': 16384,
  '--max-batch': 256,
  '--max-heads': 128,
  '--tensor-store-bytes': 268435456,
};

const limits = new Map(Object.entries(DEFAULTS).map(([flag, value]) => [flag, { value, learned: false }]));

// Asks the service for its limits, once, at load: each key of the answer
// is a flag with underscores (max_body_bytes: --max-body-bytes). Resolves
// to 'server' when it gave at least one the page uses, else 'default' (no
// such endpoint, an error, no answer within timeout_ms); never rejects.
export async function load_limits(timeout_ms = 5000) {
  try {
    const res = await fetch('limits', { signal: AbortSignal.timeout(timeout_ms) });
    if (!res.ok) return 'default';
    const told = await res.json();
    let used = 0;
    for (const [key, value] of Object.entries(told)) {
      const flag = `--${key.replaceAll('_', '-')}`;
      if (limits.has(flag) && Number.isFinite(value) && value > 0) {
        limits.set(flag, { value, learned: true });
        used++;
      }
    }
    return used ? 'server' : 'default';
  } catch {
    return 'default';
  }
}

export function limit_of(flag) {
  return limits.get(flag)?.value ?? Infinity;
}

// "the default --max-body-bytes" or "this server's --max-body-bytes".
function source_of(flag) {
  return limits.get(flag)?.learned ? `this server's ${flag}` : `the default ${flag}`;
}

// Bytes in KiB or MiB, with `digits` decimals of MiB (default: none from
// 10 MiB, one below).
export function mib(nbytes, digits = null) {
  const m = nbytes / 1048576;
  if (m >= 1 || digits !== null) return `${m.toFixed(digits ?? (m >= 10 ? 0 : 1))} MiB`;
  return nbytes < 1024 ? `${nbytes} B` : `${(nbytes / 1024).toFixed(1)} KiB`;
}

// "about A; at most B" with enough decimals that A > B shows.
function over_pair(bytes, max) {
  for (const digits of [null, 1, 2, 3]) {
    const [a, b] = [mib(bytes, digits), mib(max, digits)];
    if (a !== b) return [a, b];
  }
  return [`${bytes} bytes`, `${max} bytes`];
}

export function count(v) {
  if (v >= 1e9) return `${(v / 1e9).toFixed(1)} billion`;
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)} million`;
  return String(v);
}

// The request the page would generate for the form's p, estimated (see
// estimate_request in generate.js): { over: message or null, text: the
// line shown under the form }.
export function judge_generated(est, p, base64) {
  const body_max = limit_of('--max-body-bytes');
  const map_max = limit_of('--max-map-elems');
  const dim_max = limit_of('--max-dim');
  const heads_max = limit_of('--max-heads');
  const text = `About ${mib(est.bytes)} to send${est.refs ? `, ${est.refs} tensor${est.refs > 1 ? 's' : ''} by ref` : ''} ` +
    `(the server takes at most ${mib(body_max)}, ` +
    `${source_of('--max-body-bytes')}); ${count(est.maps)} attention-map values ` +
    `(at most ${count(map_max)}, ${source_of('--max-map-elems')}).`;
  const layered = est.layers > 1 ? ` in each of ${est.layers} layers` : '';
  let over = null;
  if (est.n > dim_max)
    over = `${est.n} tokens; the server takes at most ${dim_max} (${source_of('--max-dim')}): ` +
      'use fewer repeats or a shorter sentence';
  else if (est.d > dim_max)
    over = `d_model ${est.d}; the server takes at most ${dim_max} (${source_of('--max-dim')}): use a smaller d_model`;
  else if (p.heads > heads_max)
    over = `${p.heads} heads; the server takes at most ${heads_max} (${source_of('--max-heads')}): use fewer heads`;
  else if (est.bytes > body_max) {
    const what = est.w_bytes >= est.x_bytes
      ? `d_model ${est.d} with ${est.mats} weight matrices (w_q, w_k, w_v)${layered}`
      : `${est.n} tokens of d_model ${est.d}`;
    const change = est.w_bytes >= est.x_bytes ? 'use a smaller d_model or fewer layers'
      : 'use fewer tokens or a smaller d_model';
    const b64 = !base64 && est.b64_bytes <= body_max
      ? `, or the base64 wire format (about ${mib(est.b64_bytes)})` : '';
    const [a, b] = over_pair(est.bytes, body_max);
    over = `${what} makes a request of about ${a}; the server takes at most ` +
      `${b} (${source_of('--max-body-bytes')}): ${change}${b64}`;
  } else if (est.maps > map_max) {
    over = `${est.n} queries \u00d7 ${est.n} keys \u00d7 ${p.heads} heads` +
      (est.layers > 1 ? ` \u00d7 ${est.layers} layers` : '') +
      ` make ${count(est.maps)} attention-map values; the server returns at most ${count(map_max)} ` +
      `(${source_of('--max-map-elems')}): use fewer tokens, heads or layers`;
  } else if (est.output > map_max) {
    over = `the output of ${est.n} tokens \u00d7 ${p.heads * est.dk} values holds ${count(est.output)} values; ` +
      `the server returns at most ${count(map_max)} (${source_of('--max-map-elems')}): use fewer tokens or a smaller d_model`;
  } else if (est.qk > map_max) {
    over = `the queries and keys asked for (neuron view) hold ${count(est.qk)} values; the server returns at most ` +
      `${count(map_max)} (${source_of('--max-map-elems')}): untick "Ask for queries and keys" or use fewer tokens`;
  }
  return { over, text };
}

// A body about to be sent (a string, or a Blob of its UTF-8 bytes), when
// it is over the body limit: a message, else null. UTF-8 takes at least one
// byte per UTF-16 unit and at most three, so a string's exact count is
// needed only in between.
export function judge_body(body, what = 'the request') {
  const max = limit_of('--max-body-bytes');
  let bytes = typeof body === 'string' ? body.length : body.size;
  if (typeof body === 'string') {
    if (bytes * 3 <= max) return null;
    if (bytes <= max) bytes = new TextEncoder().encode(body).length;
  }
  if (bytes <= max) return null;
  const [a, b] = over_pair(bytes, max);
  return `${what} is ${a}; the server takes at most ${b} (${source_of('--max-body-bytes')}): ` +
    'send a smaller request, or use the base64 wire format';
}

// The request JSON box's text: { over: message or null, text: the line
// shown under the form }.
export function judge_json(text) {
  return { over: judge_body(text, 'the request JSON'),
    text: `About ${mib(text.length)} of JSON (the server takes at most ${mib(limit_of('--max-body-bytes'))}, ` +
      `${source_of('--max-body-bytes')}).` };
}

// What to change for each limit a 413 can name.
const ADVICE = {
  '--max-body-bytes': (v, msg) => {
    const has = /(?:Content-Length is|has) (\d+) bytes/.exec(msg);
    return `The request ${has ? `is ${mib(Number(has[1]))}; this server takes at most` : 'is larger than this server takes,'} ` +
      `${mib(v)}: use a smaller d_model, fewer tokens or layers, or the base64 wire format.`;
  },
  '--max-map-elems': (v) => `The attention maps (heads \u00d7 queries \u00d7 keys, over all layers) or the output ` +
    `hold more values than this server returns (${count(v)}): use fewer tokens, heads or layers.`,
  '--max-flops': () => 'The request needs more computation than this server does for one request: ' +
    'use fewer tokens, a smaller d_model or fewer layers.',
  '--max-request-bytes': () => 'The request needs more working memory than this server gives one request: ' +
    'use fewer tokens, heads or layers.',
  '--max-dim': (v) => `A size (tokens, d_model, d_k) is larger than this server takes (${v}): ` +
    'use fewer tokens or a smaller d_model.',
  '--max-batch': (v) => `The batch is larger than this server takes (${v} elements): send fewer elements.`,
  '--max-heads': (v) => `There are more heads than this server takes (${v}): use fewer heads.`,
};

// The flag and value a service error names ("...; the limit --max-flops
// (ATTND_MAX_FLOPS) is 100", "over the limit --max-body-bytes (...) of N
// bytes", "more than N values, the limit --max-map-elems"), or null.
function named_limit(message) {
  let m = /the limit (--[a-z-]+) \([A-Z_]+\)(?:, [^,]*,)? is (\d+)/.exec(message);
  if (m) return { flag: m[1], value: Number(m[2]) };
  m = /over the limit (--[a-z-]+) \([A-Z_]+\) of (\d+)/.exec(message);
  if (m) return { flag: m[1], value: Number(m[2]) };
  m = /more than (\d+) values, the limit (--[a-z-]+)/.exec(message);
  if (m) return { flag: m[2], value: Number(m[1]) };
  return null;
}

// For a 413 from the service: remembers the limit it names and returns
// what to change, in the page's words; '' for any other error.
export function advice_for(err) {
  if (err.status !== 413) return '';
  const named = named_limit(err.message);
  if (!named) return 'The request is over one of this server\'s limits: use fewer tokens, a smaller d_model, ' +
    'fewer heads or fewer layers.';
  if (limits.has(named.flag)) limits.set(named.flag, { value: named.value, learned: true });
  const say = ADVICE[named.flag];
  return say ? say(named.value, err.message) : `The request is over this server's ${named.flag} (${named.value}).`;
}
