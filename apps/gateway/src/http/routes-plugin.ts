import type { FastifyPluginAsyncJsonSchemaToTs } from '@fastify/type-provider-json-schema-to-ts';

/**
 * A plugin of routes whose request types come from their JSON schemas (json-schema-to-ts), so a schema and the
 * type a handler reads cannot drift apart: a route declares its schema and nothing else.
 */
export type RoutesPlugin<Deps extends object> = FastifyPluginAsyncJsonSchemaToTs<{ Options: Deps }>;
