// Drives cosmos-sim with the official @azure/cosmos SDK and prints one JSON line of results.
// Usage: node sdk_roundtrip.mjs <endpoint> <key> <tools/node dir>
import { createRequire } from "node:module";

const [endpoint, key, nodeDir] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const { CosmosClient } = require("@azure/cosmos");

const DEVICES = 500;
const ITEMS = 10000;
// Item i: device drone-(i % DEVICES), on a 100 x 100 grid of points 0.001 degrees apart.
const item = (i) => ({
  id: `p-${i}`,
  deviceId: `drone-${i % DEVICES}`,
  seq: i,
  location: { type: "Point", coordinates: [10 + (i % 100) * 0.001, 50 + Math.floor(i / 100) * 0.001] },
});

const client = new CosmosClient({ endpoint, key, connectionPolicy: { enableEndpointDiscovery: false } });
const { database } = await client.databases.createIfNotExists({ id: "sdk" });
const { container } = await database.containers.createIfNotExists({
  id: "positions",
  partitionKey: { paths: ["/deviceId"], version: 2 },
});

const upserted = await container.items.upsert({ id: "single", deviceId: "solo", seq: -1 });
const read = await container.item("single", "solo").read();

const ops = Array.from({ length: ITEMS }, (_, i) => ({ operationType: "Upsert", partitionKey: item(i).deviceId, resourceBody: item(i) }));
const results = await container.items.executeBulkOperations(ops);
const statuses = {};
const firstError = results.find((r) => r.error);
if (firstError) console.error("bulk error:", firstError.error && (firstError.error.stack || firstError.error.message));
for (const r of results) {
  const code = r.response ? r.response.statusCode : `error:${r.error && r.error.code}`;
  statuses[code] = (statuses[code] || 0) + 1;
}

const single = await container.items
  .query(
    { query: "SELECT * FROM c WHERE c.deviceId = @d ORDER BY c.seq", parameters: [{ name: "@d", value: "drone-7" }] },
    { partitionKey: "drone-7" },
  )
  .fetchAll();

const center = [10.05, 50.05];
const radius = 2000;
const near = await container.items
  .query({
    query: "SELECT c.id FROM c WHERE ST_DISTANCE(c.location, {'type': 'Point', 'coordinates': [@lon, @lat]}) < @r",
    parameters: [
      { name: "@lon", value: center[0] },
      { name: "@lat", value: center[1] },
      { name: "@r", value: radius },
    ],
  })
  .fetchAll();

const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();

console.log(
  JSON.stringify({
    upsertStatus: upserted.statusCode,
    readId: read.resource && read.resource.id,
    statuses,
    singleSeqs: single.resources.map((d) => d.seq),
    nearIds: near.resources.map((d) => d.id).sort(),
    ranges: ranges.length,
  }),
);
