import { Ajv, type ValidateFunction } from 'ajv';

// strict off: clients' schemas use keywords (`examples`, vendor extensions) Ajv does not know.
const ajv = new Ajv({ allErrors: false, strict: false });
// Keyed by the schema object: builtin tools' schemas are compiled once; a client's (parsed per read) is dropped
// with its object, and Ajv's own cache lets go of it at once (removeSchema) so it does not grow.
const compiled = new WeakMap<object, ValidateFunction>();

/** Why `schema` is not a JSON schema Ajv can check arguments against, or null when it is. */
export function schemaProblem(schema: unknown): string | null {
  if (!schema || typeof schema !== 'object' || Array.isArray(schema)) return 'must be a JSON object';
  return (ajv.validateSchema(schema) as boolean) ? null : `is not a valid JSON schema: ${ajv.errorsText(ajv.errors, { dataVar: 'schema' }).slice(0, 200)}`;
}

/**
 * Why `args` cannot be a call's arguments under the tool's JSON schema (an approver's modifier), or null when
 * they fit: a predicate phrase naming the first problem and where it is ("does not fit calculate's arguments: …").
 */
export function argumentsProblem(toolName: string, schema: Record<string, unknown>, args: unknown): string | null {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = ajv.compile(schema);
    ajv.removeSchema(schema);
    compiled.set(schema, validate);
  }
  if (!args || typeof args !== 'object' || Array.isArray(args)) return 'is not a JSON object';
  if (validate(args)) return null;
  const e = validate.errors?.[0];
  return `does not fit ${toolName}'s arguments: ${e ? `${e.instancePath || '/'} ${e.message ?? ''}`.trim() : 'invalid'}`;
}
