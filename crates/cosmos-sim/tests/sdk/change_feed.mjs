// Reads cosmos-sim's change feed with the official @azure/cosmos SDK's pull-model iterator and
// prints one JSON line of what it saw. Usage: node change_feed.mjs <endpoint> <key> <tools/node dir>
//
// 50 drones, one document each (id = deviceId), upserted in rounds with a rising `seq`:
// - rounds 0..2, then a feed from the beginning: each drone once, at its latest version;
// - a feed from now, caught up, then round 3 for drones 0..9: both feeds see those 10;
// - range "0" split, then round 4 for all 50: the beginning feed follows the split;
// - a feed resumed from the beginning feed's continuation token, then round 5 for drones
//   0..4: it sees those 5.
import { createRequire } from "node:module";

const [endpoint, key, nodeDir] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const { CosmosClient, ChangeFeedStartFrom, StatusCodes } = require("@azure/cosmos");

const DRONES = 50;
const client = new CosmosClient({ endpoint, key, connectionPolicy: { enableEndpointDiscovery: false } });
const { database } = await client.databases.createIfNotExists({ id: "feed" });
const { container } = await database.containers.createIfNotExists({
  id: "positions",
  partitionKey: { paths: ["/deviceId"], version: 2 },
});

const round = async (seq, drones) => {
  for (let i = 0; i < drones; i++) {
    await container.items.upsert({ id: `d-${i}`, deviceId: `d-${i}`, seq });
  }
};

// Reads until the iterator answers 304 (every range checked, nothing new); the changes seen,
// whether each page was in change order, and the continuation token.
const drain = async (iterator) => {
  const seen = [];
  let ordered = true;
  for (;;) {
    const page = await iterator.readNext();
    if (page.statusCode === StatusCodes.NotModified) {
      return { seen, ordered, continuation: page.continuationToken };
    }
    const lsns = page.result.map((d) => d._lsn);
    ordered &&= lsns.every((l, i) => typeof l === "number" && (i === 0 || lsns[i - 1] < l));
    seen.push(...page.result.map((d) => ({ id: d.id, seq: d.seq })));
  }
};

for (const seq of [0, 1, 2]) await round(seq, DRONES);
const beginning = container.items.getChangeFeedIterator({
  changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
  maxItemCount: 7,
});
const first = await drain(beginning);

const now = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now() });
const nowBefore = await drain(now);
await round(3, 10);
const nowAfter = await drain(now);
const second = await drain(beginning);

const split = await fetch(new URL("_admin/split", endpoint), {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ database: "feed", container: "positions", rangeId: "0" }),
});
await round(4, DRONES);
const afterSplit = await drain(beginning);

await round(5, 5);
const resumed = container.items.getChangeFeedIterator({
  changeFeedStartFrom: ChangeFeedStartFrom.Continuation(afterSplit.continuation),
});
const fromToken = await drain(resumed);

const { resources: stored } = await container.items.query("SELECT c.id, c.seq FROM c").fetchAll();
const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();

console.log(
  JSON.stringify({
    first,
    nowBefore: nowBefore.seen,
    nowAfter: nowAfter.seen,
    second: second.seen,
    splitStatus: split.status,
    afterSplit,
    fromToken: fromToken.seen,
    stored,
    ranges: ranges.length,
  }),
);
