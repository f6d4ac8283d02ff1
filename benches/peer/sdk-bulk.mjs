// Creates the container if needed (not timed), then writes every document of a JSONL file
// to it with the official JavaScript SDK's bulk API (`container.items.executeBulkOperations`,
// @azure/cosmos as pinned in tools/node), as Upsert operations keyed by the document's
// partition key value.
//
// Usage: node sdk-bulk.mjs --endpoint URL --database DB --container COLL --pk-field FIELD FILE.jsonl
// The account key comes from the environment variable COSMOS_KEY (never the command line).
//
// Prints one JSON line: {"documents":N,"succeeded":N,"failed":N,"wallSecs":S,"failures":{...}}.
// Exits 1 when any operation failed.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "..", "tools", "node", "package.json"));
const { CosmosClient } = require("@azure/cosmos");

const { values, positionals } = parseArgs({
  options: {
    endpoint: { type: "string" },
    database: { type: "string" },
    container: { type: "string" },
    "pk-field": { type: "string", default: "deviceId" },
  },
  allowPositionals: true,
});
const key = process.env.COSMOS_KEY;
if (!values.endpoint || !values.database || !values.container || positionals.length !== 1 || !key) {
  console.error(
    "usage: COSMOS_KEY=... node sdk-bulk.mjs --endpoint URL --database DB --container COLL [--pk-field F] FILE.jsonl",
  );
  process.exit(2);
}

const documents = readFileSync(positionals[0], "utf8")
  .split("\n")
  .filter((line) => line.length > 0)
  .map((line) => JSON.parse(line));
const operations = documents.map((doc) => ({
  operationType: "Upsert",
  partitionKey: doc[values["pk-field"]],
  resourceBody: doc,
}));

const client = new CosmosClient({
  endpoint: values.endpoint,
  key,
  // The local endpoint advertises no other regions: do not look for them.
  connectionPolicy: { enableEndpointDiscovery: false },
});
// The same container definition as the cloud-writer creates: hash v2 key, spatial index.
const { database } = await client.databases.createIfNotExists({ id: values.database });
const { container } = await database.containers.createIfNotExists({
  id: values.container,
  partitionKey: { paths: [`/${values["pk-field"]}`], kind: "Hash", version: 2 },
  indexingPolicy: {
    indexingMode: "consistent",
    automatic: true,
    includedPaths: [{ path: "/*" }],
    excludedPaths: [{ path: '/"_etag"/?' }],
    spatialIndexes: [{ path: "/location/*", types: ["Point", "Polygon"] }],
  },
});

const started = process.hrtime.bigint();
const results = await container.items.executeBulkOperations(operations);
const wallSecs = Number(process.hrtime.bigint() - started) / 1e9;

let succeeded = 0;
const failures = {};
for (const result of results) {
  const status = result.response?.statusCode ?? result.error?.code ?? "none";
  if (typeof status === "number" && status >= 200 && status < 300) {
    succeeded += 1;
  } else {
    failures[status] = (failures[status] ?? 0) + 1;
  }
}
const failed = documents.length - succeeded;
console.log(JSON.stringify({ documents: documents.length, succeeded, failed, wallSecs, failures }));
process.exit(failed === 0 ? 0 : 1);
