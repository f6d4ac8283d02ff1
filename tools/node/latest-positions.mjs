// Reads every latest-position document of a container with the official SDK (@azure/cosmos)
// and prints one JSON line: how many drones, and the oldest and newest device times among
// their stored positions. Used by scripts/outage-run to check that every drone ended at its
// newest position.
//
// Usage: COSMOS_KEY=... node latest-positions.mjs ENDPOINT DATABASE CONTAINER
import { CosmosClient } from "@azure/cosmos";

const [endpoint, database, container] = process.argv.slice(2);
if (!endpoint || !database || !container || !process.env.COSMOS_KEY) {
  console.error("usage: COSMOS_KEY=... node latest-positions.mjs ENDPOINT DATABASE CONTAINER");
  process.exit(2);
}
const client = new CosmosClient({
  endpoint,
  key: process.env.COSMOS_KEY,
  connectionPolicy: { enableEndpointDiscovery: false },
});
const query = "SELECT c.deviceId, c.deviceTimeMs FROM c WHERE c.kind = 'latest'";
const { resources } = await client
  .database(database)
  .container(container)
  .items.query(query)
  .fetchAll();
const times = resources.map((d) => d.deviceTimeMs);
console.log(
  JSON.stringify({
    drones: new Set(resources.map((d) => d.deviceId)).size,
    documents: resources.length,
    oldestDeviceTimeMs: Math.min(...times),
    newestDeviceTimeMs: Math.max(...times),
  }),
);
