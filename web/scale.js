// scale.js: which colour scale a map is drawn with. "auto" picks one from
// the request; the other modes are the user's override.
//
// The automatic rule (also in the page's help and docs/dashboard.md):
//   - rows are scaled to their own maximum when keys are hidden unevenly
//     across rows (a causal mask or a sliding window): an early causal row
//     sees 1 or 2 keys and would otherwise hold the only bright cells;
//   - weights go through a square root when there are LONG_KEYS or more
//     keys: a row spread over m keys has weights near 1/m, which a linear
//     scale paints all but black.
// Both apply to a long causal map.

export const LONG_KEYS = 48;

// Decades shown by the log scale: weight / top from 10^-3 to 1.
const LOG_DECADES = 3;

// The scale as { kind, gamma, decades, per_row, unit, text }:
//   kind 'linear' | 'gamma' | 'log'; per_row: each row to its maximum;
//   unit: 0 to 1 for every map (comparable across maps); text: what the
//   legend says.
//   mode: the scale control's value; ctx: { uneven_rows, m }.
export function resolve_scale(mode, ctx) {
  const base = { kind: 'linear', gamma: 1, decades: LOG_DECADES, per_row: false, unit: false };
  switch (mode) {
    case 'unit': return { ...base, unit: true, text: 'Weight, 0 to 1 in every map' };
    case 'max': return { ...base, text: 'Weight as a fraction of each map\'s maximum (given in its caption)' };
    case 'sqrt': return { ...base, kind: 'gamma', gamma: 0.5,
      text: 'Square root of the weight as a fraction of each map\'s maximum' };
    case 'row': return { ...base, per_row: true, text: 'Weight as a fraction of its row\'s maximum' };
    case 'log': return { ...base, kind: 'log',
      text: `Weight on a log scale, ${LOG_DECADES} decades below each map's maximum` };
    default: break;
  }
  const long = ctx.m >= LONG_KEYS;
  const s = { ...base, per_row: Boolean(ctx.uneven_rows) };
  if (long) {
    s.kind = 'gamma';
    s.gamma = 0.5;
  }
  const why = [];
  if (s.per_row) why.push('each row to its own maximum (causal or windowed: rows see different numbers of keys)');
  if (long) why.push(`square root (${ctx.m} keys, at least ${LONG_KEYS})`);
  s.text = why.length ? `Automatic: ${why.join('; ')}`
    : 'Automatic: weight as a fraction of each map\'s maximum';
  s.auto = true;
  return s;
}

// A short name of a resolved scale, for data attributes and tests.
export function scale_name(s) {
  const parts = [s.unit ? 'unit' : s.per_row ? 'row' : 'max'];
  if (s.kind !== 'linear') parts.push(s.kind === 'gamma' ? `pow${s.gamma}` : 'log');
  return parts.join('+');
}
