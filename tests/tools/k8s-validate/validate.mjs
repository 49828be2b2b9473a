// Validates Kubernetes objects against the API's OpenAPI schemas (the kubernetes-models
// package: types, required fields, enums, formats). Reads a JSON array of objects on stdin,
// each with "apiVersion", "kind" and "_source" (where it came from, for messages); prints one
// line per error and exits 1 when there is any. It does not flag unknown fields: the schemas
// allow them, and tests/integration/test_deploy_manifests.py reads the fields that matter.
//   node validate.mjs < objects.json
import { readFileSync } from "node:fs";

const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const obj of objects) {
  const where = `${obj._source}: ${obj.kind ?? "?"} ${obj.metadata?.name ?? "?"}`;
  delete obj._source;
  if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
    console.log(`${where}: apiVersion and kind are required`);
    failed++;
    continue;
  }
  // "apps/v1" -> kubernetes-models/apps/v1/Kind; the core group "v1" -> kubernetes-models/v1/Kind.
  let Model;
  try {
    ({ [obj.kind]: Model } = await import(`kubernetes-models/${obj.apiVersion}/${obj.kind}`));
  } catch {
    Model = undefined;
  }
  if (!Model) {
    console.log(`${where}: unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`);
    failed++;
    continue;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    console.log(`${where}: ${e.message}`);
    failed++;
  }
}
if (failed === 0) console.log(`${objects.length} objects valid`);
process.exit(failed ? 1 : 0);
