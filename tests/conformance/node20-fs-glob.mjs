// Node 20 has no fs.globSync (added in Node 22), yet @modelcontextprotocol/conformance imports it by name,
// so on Node 20 loading the CLI fails ("The requested module 'fs' does not provide an export named
// 'globSync'") before any scenario runs. The server scenarios never call it. Loaded with
// `node --import ./node20-fs-glob.mjs`, this resolve hook hands every `fs` import a module with all
// of fs plus a globSync that throws if anything ever calls it. On Node 22+ it changes nothing.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  const shim =
    "data:text/javascript," +
    encodeURIComponent(
      'import fs from "node:fs"; export * from "node:fs"; export default fs;' +
        'export function globSync() { throw new Error("fs.globSync needs Node 22 or later"); }',
    );
  const hooks = `
    export async function resolve(specifier, context, next) {
      if ((specifier === "fs" || specifier === "node:fs") && !context.parentURL?.startsWith("data:")) {
        return { url: ${JSON.stringify(shim)}, shortCircuit: true };
      }
      return next(specifier, context);
    }`;
  register("data:text/javascript," + encodeURIComponent(hooks));
}
