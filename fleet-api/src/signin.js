// Sign-in for the map (served as /signin.js, before /map.js): when /map/config.json names an
// issuer and a client id, the authorization code flow with PKCE (S256) against the issuer's
// discovery document, and the access token kept in this tab's sessionStorage until it
// expires. Without a sign-in configuration the map asks the API without a credential.
"use strict";
const fleetAuth = (() => {
  const TOKEN = "fleet-map.token";
  const PENDING = "fleet-map.pending";
  const SIGNED_IN_AT = "fleet-map.signed-in-at";
  // A 401 this soon after signing in is not fixed by signing in again (a wrong audience, an
  // issuer the API does not trust): say so instead of redirecting in a loop.
  const LOOP_MS = 15000;
  let config = null;

  const b64url = bytes => btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const random = () => b64url(crypto.getRandomValues(new Uint8Array(32)));
  const redirectUri = () => location.origin + "/";

  async function discovery() {
    const r = await fetch(config.issuer.replace(/\/$/, "") + "/.well-known/openid-configuration");
    if (!r.ok) throw new Error(`the issuer's discovery document answered ${r.status}`);
    return r.json();
  }

  function stored() {
    const t = JSON.parse(sessionStorage.getItem(TOKEN) || "null");
    return t && t.expiresAt > Date.now() ? t : null;
  }

  async function signIn() {
    const at = Number(sessionStorage.getItem(SIGNED_IN_AT) || 0);
    if (Date.now() - at < LOOP_MS) {
      throw new Error("signed in, but the API refuses the token: check API_OIDC_AUDIENCE and API_MAP_SCOPE");
    }
    const d = await discovery();
    const verifier = random(), state = random(), nonce = random();
    const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
    sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, back: location.search }));
    const q = new URLSearchParams({
      client_id: config.clientId, response_type: "code", response_mode: "query",
      redirect_uri: redirectUri(), scope: config.scope, state, nonce,
      code_challenge: challenge, code_challenge_method: "S256",
    });
    location.assign(`${d.authorization_endpoint}?${q}`);
    return new Promise(() => {}); // the page is leaving
  }

  async function redeem(params) {
    const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
    sessionStorage.removeItem(PENDING);
    if (!pending || params.get("state") !== pending.state) {
      throw new Error("the sign-in answer does not belong to this page's request (state)");
    }
    const d = await discovery();
    const r = await fetch(d.token_endpoint, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "authorization_code", client_id: config.clientId, code: params.get("code"),
        redirect_uri: redirectUri(), code_verifier: pending.verifier,
      }),
    });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error_description || body.error || `token endpoint ${r.status}`);
    const lifetimeMs = 1000 * (Number(body.expires_in) || 300);
    sessionStorage.setItem(TOKEN, JSON.stringify({ token: body.access_token, expiresAt: Date.now() + lifetimeMs - 30000 }));
    sessionStorage.setItem(SIGNED_IN_AT, String(Date.now()));
    history.replaceState(null, "", "/" + (pending.back || ""));
  }

  async function start() {
    config = (await (await fetch("/map/config.json")).json()).signIn;
    if (!config) return;
    const params = new URLSearchParams(location.search);
    if (params.has("error")) throw new Error(params.get("error_description") || params.get("error"));
    if (params.has("code")) await redeem(params);
    else if (!stored()) await signIn();
  }

  const ready = start();
  return {
    // Settles once the page may ask the API (signed in, or no sign-in needed).
    ready,
    // The headers that carry the credential, if any.
    headers() {
      const t = stored();
      return t ? { authorization: "Bearer " + t.token } : {};
    },
    // After a 401: sign in again where the map signs in.
    async unauthorized() {
      if (!config) return;
      sessionStorage.removeItem(TOKEN);
      await signIn();
    },
  };
})();
