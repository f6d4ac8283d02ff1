// Reads every track segment of a container with the official @azure/cosmos SDK and prints one
// JSON line: per segment its id, deviceId, startMs, endMs and points as [seq, deviceTimeMs],
// and the bytes of each document as the SDK received it (system properties included).
// The writer's own decoder is not used: this is what any client of the container sees.
//
// Usage: node track_segments.mjs <endpoint> <key> <tools/node dir> <database> <container>
import { createRequire } from "node:module";

const [endpoint, key, nodeDir, database, container] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const { CosmosClient } = require("@azure/cosmos");

const client = new CosmosClient({ endpoint, key, connectionPolicy: { enableEndpointDiscovery: false } });
const { resources } = await client
  .database(database)
  .container(container)
  .items.query("SELECT * FROM c WHERE c.kind = 'segment'")
  .fetchAll();
const segments = resources.map((d) => ({
  id: d.id,
  deviceId: d.deviceId,
  startMs: d.startMs,
  endMs: d.endMs,
  ttl: d.ttl,
  points: d.points.map((p) => [p[0], p[1]]),
  bytes: Buffer.byteLength(JSON.stringify(d)),
}));
console.log(JSON.stringify({ segments }));
