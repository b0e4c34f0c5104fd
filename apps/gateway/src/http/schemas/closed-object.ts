/**
 * A response object schema that names every field once: each is required and no other is allowed, so the list of
 * required fields cannot drift from the properties (json-schema-to-ts still types each field).
 */
export function closedObject<const P extends Record<string, object>>(properties: P) {
  return { type: 'object', additionalProperties: false, required: Object.keys(properties) as (keyof P & string)[], properties } as const;
}
