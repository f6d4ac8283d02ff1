// Drives cosmos-sim with the official @azure/cosmos SDK signed in through @azure/identity's
// ClientSecretCredential, and with the key where local authentication is disabled; prints one
// JSON line of results.
// Usage: node sdk_entra.mjs <endpoint> <key> <tools/node dir> <authority host> <tenant> <client id> <secret>
// (the authority host's CA in NODE_EXTRA_CA_CERTS).
import { createRequire } from "node:module";

const [endpoint, key, nodeDir, authorityHost, tenant, clientId, secret] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const { CosmosClient } = require("@azure/cosmos");
const { ClientSecretCredential } = require("@azure/identity");

const connectionPolicy = { enableEndpointDiscovery: false };
// The scopes the SDK asks the issuer for, in order.
const scopes = [];
const credential = new ClientSecretCredential(tenant, clientId, secret, {
  authorityHost,
  disableInstanceDiscovery: true,
});
const getToken = credential.getToken.bind(credential);
credential.getToken = (scope, options) => {
  scopes.push(...[scope].flat());
  return getToken(scope, options);
};

const aad = new CosmosClient({ endpoint, aadCredentials: credential, connectionPolicy });
const container = aad.database("sdk").container("positions");
const upserted = await container.items.upsert({ id: "p1", deviceId: "drone-1", seq: 1 });
const read = await container.item("p1", "drone-1").read();
const queried = await container.items
  .query({ query: "SELECT c.id, c.seq FROM c WHERE c.deviceId = @d", parameters: [{ name: "@d", value: "drone-1" }] })
  .fetchAll();
let createContainer;
try {
  await aad.database("sdk").containers.create({ id: "more", partitionKey: { paths: ["/deviceId"] } });
  createContainer = { code: 201 };
} catch (e) {
  createContainer = { code: e.code, substatus: e.substatus };
}

let keyed;
try {
  const withKey = new CosmosClient({ endpoint, key, connectionPolicy });
  await withKey.database("sdk").container("positions").item("p1", "drone-1").read();
  keyed = { code: 200 };
} catch (e) {
  keyed = { code: e.code, message: e.message };
}

console.log(
  JSON.stringify({
    scopes,
    upsertStatus: upserted.statusCode,
    readSeq: read.resource && read.resource.seq,
    queried: queried.resources,
    createContainer,
    keyed,
  }),
);
