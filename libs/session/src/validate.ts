import { Ajv } from 'ajv';
import { builtinTools } from '@cadre/agent';
import type { ClientTool } from '@cadre/store';
import { invalid } from './errors.ts';
import { SESSION_LIMITS as L } from './limits.ts';

/** A tool as an edge receives it (roz ToolSchema, the HTTP body). */
export interface ToolInput {
  name: string;
  description?: string;
  parameters?: Record<string, unknown> | null;
  timeout_ms?: number;
  category?: string;
}

const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
// Checks client schemas against the JSON Schema meta-schema (nothing is compiled or cached); strict mode off
// because clients use keywords (e.g. `examples`, vendor extensions) Ajv does not know.
const ajv = new Ajv({ strict: false });

/** Checks and normalises client tools; throws invalid_argument naming the first bad one. */
export function clientTools(tools: readonly ToolInput[], source: string, what: string): ClientTool[] {
  if (tools.length > L.tools) throw invalid(`${what}: at most ${L.tools} tools, got ${tools.length}`);
  if (source.length > L.source || (source !== '' && !TOOL_NAME.test(source))) throw invalid(`${what}: source must match [A-Za-z0-9_-]{1,64}`);
  const seen = new Set<string>();
  return tools.map((tool, i) => {
    const where = `${what}[${i}]`;
    if (typeof tool.name !== 'string' || !TOOL_NAME.test(tool.name)) throw invalid(`${where}.name must match [A-Za-z0-9_-]{1,64}, got "${String(tool.name).slice(0, 80)}"`);
    if (Object.hasOwn(builtinTools, tool.name)) throw invalid(`${where}.name "${tool.name}" is a builtin tool's name`);
    if (seen.has(tool.name)) throw invalid(`${where}.name "${tool.name}" appears twice`);
    seen.add(tool.name);
    const description = tool.description ?? '';
    if (description.length > L.toolDescription) throw invalid(`${where}.description is longer than ${L.toolDescription} characters`);
    const timeout = tool.timeout_ms ?? 0;
    if (!Number.isInteger(timeout) || timeout < 0 || timeout > L.toolTimeoutMs) throw invalid(`${where}.timeout_ms must be 0..${L.toolTimeoutMs}`);
    return {
      name: tool.name,
      description,
      parameters: toolSchema(tool.parameters, where),
      timeout_ms: timeout,
      source,
      category: tool.category ?? '',
    };
  });
}

/** An empty schema (roz clients send `{}`) means "an object with anything"; anything else must compile. */
function toolSchema(schema: Record<string, unknown> | null | undefined, where: string): Record<string, unknown> {
  if (schema === null || schema === undefined || Object.keys(schema).length === 0) return { type: 'object', properties: {} };
  if (typeof schema !== 'object' || Array.isArray(schema)) throw invalid(`${where}.parameters_schema must be a JSON object`);
  if (JSON.stringify(schema).length > L.toolSchemaBytes) throw invalid(`${where}.parameters_schema is larger than ${L.toolSchemaBytes} bytes`);
  if (schema.type !== undefined && schema.type !== 'object') throw invalid(`${where}.parameters_schema must describe an object (type "object"), got type ${JSON.stringify(schema.type)}`);
  if (!(ajv.validateSchema(schema) as boolean)) {
    throw invalid(`${where}.parameters_schema is not a valid JSON schema: ${ajv.errorsText(ajv.errors, { dataVar: 'schema' }).slice(0, 200)}`);
  }
  return schema;
}

export function checkText(value: string, max: number, what: string, required = false): void {
  if (typeof value !== 'string') throw invalid(`${what} must be a string`);
  if (required && value.trim() === '') throw invalid(`${what} must not be empty`);
  if (value.length > max) throw invalid(`${what} is longer than ${max} characters`);
}

/** An image of a user message as edges hand it over: its media type and its bytes, base64-encoded. */
export interface ImageInput {
  mime_type: string;
  data: string;
}

/** What the model API takes as images (OpenAI vision input). */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'] as const;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Checks a message's images and turns them into data URLs; throws invalid_argument naming the first bad one. */
export function imageUrls(images: readonly ImageInput[]): string[] {
  if (images.length > L.images) throw invalid(`images: at most ${L.images} per message, got ${images.length}`);
  return images.map((image, i) => {
    if (!(IMAGE_TYPES as readonly string[]).includes(image.mime_type)) {
      throw invalid(`images[${i}].mime_type must be one of ${IMAGE_TYPES.join(', ')}, got "${String(image.mime_type).slice(0, 64)}"`);
    }
    if (typeof image.data !== 'string' || image.data === '' || !BASE64.test(image.data)) throw invalid(`images[${i}].data must be non-empty base64`);
    const bytes = (image.data.length / 4) * 3 - (image.data.endsWith('==') ? 2 : image.data.endsWith('=') ? 1 : 0);
    if (bytes > L.imageBytes) throw invalid(`images[${i}]: at most ${L.imageBytes} bytes, got ${bytes}`);
    return `data:${image.mime_type};base64,${image.data}`;
  });
}
