/** Task and run ids are UUIDs (any version); anything else is refused before it reaches a key or a path. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SIMPLE = /^[0-9a-f]{32}$/i;

export function isUuid(id: string): boolean {
  return UUID.test(id);
}

/**
 * The canonical spelling (lower-case, hyphenated) of a UUID written in any form roz accepts for a task id
 * (Rust's `Uuid::parse_str`): hyphenated, 32 hex digits without hyphens, `{hyphenated}` in braces, or
 * `urn:uuid:hyphenated`; hex digits in either case. `null` for anything else. Keys and logs only ever see the
 * canonical form, so every spelling of one id names the same task.
 */
export function canonicalUuid(id: string): string | null {
  if (SIMPLE.test(id)) {
    const hex = id.toLowerCase();
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  let hyphenated = id;
  if (id.length === 38 && id.startsWith('{') && id.endsWith('}')) hyphenated = id.slice(1, -1);
  else if (id.length === 45 && id.startsWith('urn:uuid:')) hyphenated = id.slice('urn:uuid:'.length);
  return UUID.test(hyphenated) ? hyphenated.toLowerCase() : null;
}
