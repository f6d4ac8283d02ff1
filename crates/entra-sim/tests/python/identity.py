"""Microsoft's identity libraries (MSAL, azure-identity) against the local Entra ID issuer.

Usage: identity.py MODE; the issuer's coordinates come from the environment (ENTRA_*), and
REQUESTS_CA_BUNDLE names the issuer's CA (both libraries accept only https authorities).
Prints one JSON line: the token, or the error as the library surfaced it.
"""
import json
import os
import sys
from urllib.parse import parse_qs, urlparse

import msal
import requests
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import (
    ClientSecretCredential, ManagedIdentityCredential, WorkloadIdentityCredential)

env = os.environ.get


def msal_error(result):
    return {k: result.get(k) for k in ("error", "error_description", "error_codes")}


def confidential(credential):
    # instance_discovery=False: MSAL would otherwise ask login.microsoftonline.com whether
    # this host is a known authority.
    app = msal.ConfidentialClientApplication(
        env("ENTRA_CLIENT_ID"), client_credential=credential,
        authority=env("ENTRA_AUTHORITY"), instance_discovery=False)
    result = app.acquire_token_for_client(scopes=[env("ENTRA_SCOPE")])
    if "access_token" in result:
        return {"access_token": result["access_token"], "expires_in": result["expires_in"]}
    return msal_error(result)


def certificate(mode):
    with open(env("ENTRA_KEY")) as f:
        key = f.read()
    with open(env("ENTRA_CERT")) as f:
        cert = f.read()
    if mode == "thumbprint":  # x5t (SHA-1) and RS256
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        sha1 = x509.load_pem_x509_certificate(cert.encode()).fingerprint(hashes.SHA1()).hex()
        return {"private_key": key, "thumbprint": sha1}
    return {"private_key": key, "public_certificate": cert}  # x5t#S256 and PS256


def azure_identity(credential):
    try:
        token = credential.get_token(env("ENTRA_SCOPE"))
        return {"access_token": token.token, "expires_on": token.expires_on}
    except ClientAuthenticationError as e:
        return {"error": type(e).__name__, "message": str(e)}


def auth_code(wrong_verifier):
    app = msal.PublicClientApplication(
        env("ENTRA_CLIENT_ID"), authority=env("ENTRA_AUTHORITY"), instance_discovery=False)
    scopes = [env("ENTRA_SCOPE")]
    flow = app.initiate_auth_code_flow(scopes, redirect_uri=env("ENTRA_REDIRECT_URI"))
    # The browser's part: follow the authorization URL to the redirect, without following it.
    answer = requests.get(flow["auth_uri"], allow_redirects=False, timeout=30)
    location = answer.headers.get("Location", "")
    if not location.startswith(env("ENTRA_REDIRECT_URI")):
        return {"error": "no redirect", "status": answer.status_code, "body": answer.text}
    auth_response = {k: v[0] for k, v in parse_qs(urlparse(location).query).items()}
    if wrong_verifier:
        flow["code_verifier"] = flow["code_verifier"][::-1]
    result = app.acquire_token_by_auth_code_flow(flow, auth_response)
    if "access_token" not in result:
        return msal_error(result)
    account = app.get_accounts()[0]
    refreshed = app.acquire_token_silent(scopes, account=account, force_refresh=True) or {}
    return {
        "access_token": result["access_token"],
        "id_token": result["id_token"],
        "nonce_hash": result["id_token_claims"].get("nonce"),
        "has_refresh_token": "refresh_token" in result,
        "account": account["username"],
        "refreshed_access_token": refreshed.get("access_token"),
        "refreshed_error": refreshed.get("error"),
    }


def main(mode):
    if mode == "msal-secret":
        return confidential(env("ENTRA_SECRET"))
    if mode in ("msal-cert-thumbprint", "msal-cert-public"):
        return confidential(certificate(mode.rsplit("-", 1)[1]))
    if mode == "identity-secret":
        return azure_identity(ClientSecretCredential(
            env("ENTRA_TENANT"), env("ENTRA_CLIENT_ID"), env("ENTRA_SECRET"),
            authority=env("ENTRA_BASE"), disable_instance_discovery=True))
    if mode == "identity-managed":
        client_id = env("ENTRA_CLIENT_ID")
        return azure_identity(
            ManagedIdentityCredential(client_id=client_id) if client_id
            else ManagedIdentityCredential())
    if mode == "identity-workload":  # AZURE_FEDERATED_TOKEN_FILE, as AKS projects it
        return azure_identity(WorkloadIdentityCredential(
            tenant_id=env("ENTRA_TENANT"), client_id=env("ENTRA_CLIENT_ID"),
            token_file_path=env("ENTRA_TOKEN_FILE"), authority=env("ENTRA_BASE"),
            disable_instance_discovery=True))
    if mode in ("msal-auth-code", "msal-auth-code-wrong-verifier"):
        return auth_code(mode.endswith("wrong-verifier"))
    raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
