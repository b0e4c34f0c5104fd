// Bounds every request must meet before any route's schema or handler sees it, checked once for every route:
// text that is well-formed Unicode, nesting no deeper than MAX_JSON_DEPTH, strings and field names no longer
// than their caps, and integers Redis and JSON can carry exactly. A body that breaks one is refused as a schema
// error naming the field, so each API answers in its own error shape, and nothing reaches Redis or Lua.

/** Levels of nesting in a body (`{"a":{"b":[1]}}` is 3); Lua's cjson refuses 1,000, JavaScript has no cap at all. */
export const MAX_JSON_DEPTH = 32;
/**
 * UTF-16 code units in any one string value, free-form fields (metadata, payloads) included: the largest any route's
 * schema allows (a session's tool result); the routes' own fields have tighter caps.
 */
export const MAX_STRING_LENGTH = 1_000_000;
/** UTF-16 code units in an object's field name. */
export const MAX_KEY_LENGTH = 256;

export interface BoundsViolation {
  /** JSON pointer of the offending value, as Ajv reports it (`/metadata/a/0`). */
  instancePath: string;
  message: string;
}

type Segment = string | number;
/** A value still to check; its path is kept as a link to its parent and spelled out only for a violation. */
interface Frame {
  value: unknown;
  depth: number;
  parent?: Frame;
  segment?: Segment;
}

function pointer(frame: Frame): string {
  const segments: Segment[] = [];
  for (let f: Frame | undefined = frame; f?.parent; f = f.parent) segments.push(f.segment!);
  return segments.reverse().map((s) => `/${String(s).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/**
 * Whether `value` meets every bound: the walk every request's params, query and body take, building nothing (a
 * frame per value was most of what a request allocated here). Recursive, but never deeper than MAX_JSON_DEPTH:
 * a deeper container is a violation and ends the walk.
 */
function withinBounds(value: unknown, depth: number): boolean {
  if (typeof value === 'string') return stringProblem(value, MAX_STRING_LENGTH) === undefined;
  if (value === null || typeof value !== 'object') return true;
  if (depth >= MAX_JSON_DEPTH) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (!withinBounds(value[i], depth + 1)) return false;
    return true;
  }
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    if (stringProblem(key, MAX_KEY_LENGTH) !== undefined || !withinBounds((value as Record<string, unknown>)[key], depth + 1)) return false;
  }
  return true;
}

/**
 * The first value of `input` that breaks a bound, or undefined. A value within bounds costs one walk that builds
 * nothing; only a violation is looked for again, iteratively (a hostile depth cannot overflow the stack), to say
 * which value broke which bound, stopping at the first problem.
 */
export function findBoundsViolation(input: unknown): BoundsViolation | undefined {
  if (withinBounds(input, 0)) return undefined;
  const stack: Frame[] = [{ value: input, depth: 0 }];
  while (stack.length > 0) {
    const frame = stack.pop()!;
    const { value, depth } = frame;
    if (typeof value === 'string') {
      const problem = stringProblem(value, MAX_STRING_LENGTH);
      if (problem) return { instancePath: pointer(frame), message: problem };
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (depth >= MAX_JSON_DEPTH) return { instancePath: pointer(frame), message: `is nested deeper than ${MAX_JSON_DEPTH} levels` };
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], depth: depth + 1, parent: frame, segment: i });
      continue;
    }
    for (const key of Object.keys(value)) {
      const problem = stringProblem(key, MAX_KEY_LENGTH);
      // A field name that cannot be printed safely is not repeated in the message.
      if (problem) return { instancePath: pointer(frame), message: `has a field name that ${problem}` };
      stack.push({ value: (value as Record<string, unknown>)[key], depth: depth + 1, parent: frame, segment: key });
    }
  }
  return undefined;
}

function stringProblem(s: string, max: number): string | undefined {
  if (s.length > max) return `is longer than ${max} characters`;
  // A lone UTF-16 surrogate (`"\ud83d"`, a string cut inside an emoji) is valid JSON but no Unicode text:
  // Redis would store U+FFFD instead and Lua's cjson refuses it.
  if (!s.isWellFormed()) return 'is not well-formed Unicode (it contains a lone surrogate)';
  return undefined;
}

/**
 * A copy of a JSON schema in which every integer without its own bounds is limited to what a double holds exactly
 * (±2^53−1): `after_seq=1e21`, `Infinity` (which Ajv coerces from a querystring) or 2^64 are refused by the
 * schema instead of reaching Redis as `1e+21`.
 */
export function withSafeIntegers<T>(schema: T): T {
  if (Array.isArray(schema)) return schema.map(withSafeIntegers) as T;
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema)) out[k] = k === 'enum' || k === 'const' || k === 'default' ? v : withSafeIntegers(v);
  const type = out.type;
  if (type === 'integer' || (Array.isArray(type) && type.includes('integer'))) {
    out.maximum ??= Number.MAX_SAFE_INTEGER;
    out.minimum ??= -Number.MAX_SAFE_INTEGER;
  }
  return out as T;
}

/**
 * Whether every number in `value` is finite, building nothing. The data passed the bounds walk, so it is at most
 * MAX_JSON_DEPTH deep; anything deeper (a default Ajv added) is left to the exact walk below.
 */
function allFinite(value: unknown, depth: number): boolean {
  if (typeof value === 'number') return Number.isFinite(value);
  if (value === null || typeof value !== 'object') return true;
  if (depth > MAX_JSON_DEPTH) return false;
  for (const key in value) {
    if (Object.hasOwn(value, key) && !allFinite((value as Record<string, unknown>)[key], depth + 1)) return false;
  }
  return true;
}

/**
 * The path of the first number in `data` that is not finite, or undefined. Ajv coerces a querystring's
 * `Infinity` to the number Infinity and then skips `maximum` for it (its bound checks apply to finite numbers
 * only), so a validator runs this after Ajv.
 */
export function findNonFiniteNumber(data: unknown): string | undefined {
  if (allFinite(data, 0)) return undefined;
  const stack: Frame[] = [{ value: data, depth: 0 }];
  while (stack.length > 0) {
    const frame = stack.pop()!;
    const { value } = frame;
    if (typeof value === 'number' && !Number.isFinite(value)) return rawPath(frame);
    if (value === null || typeof value !== 'object') continue;
    for (const key of Object.keys(value)) stack.push({ value: (value as Record<string, unknown>)[key], depth: 0, parent: frame, segment: key });
  }
  return undefined;
}

/** `/a/0/b`: the path as Ajv's coercion errors spell it (no escaping). */
function rawPath(frame: Frame): string {
  let path = '';
  for (let f: Frame | undefined = frame; f?.parent; f = f.parent) path = `/${f.segment}${path}`;
  return path;
}

interface SchemaError {
  keyword: string;
  instancePath: string;
  schemaPath: string;
  params: Record<string, unknown>;
  message?: string;
}
type Validator = ((data: unknown) => boolean) & { errors?: SchemaError[] | null };

/** `validate`, then the finite-number check; errors in Ajv's shape, so Fastify reports them as schema errors. */
export function withFiniteNumbers(validate: Validator): Validator {
  const checked: Validator = (data) => {
    if (!validate(data)) {
      checked.errors = validate.errors;
      return false;
    }
    const path = findNonFiniteNumber(data);
    checked.errors = path === undefined ? null : [{ keyword: 'type', instancePath: path, schemaPath: '', params: {}, message: 'must be a finite number' }];
    return path === undefined;
  };
  return checked;
}
