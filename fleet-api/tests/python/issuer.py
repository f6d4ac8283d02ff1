"""An OIDC issuer's keys and tokens, made with PyJWT and cryptography for the API's token
tests: the Rust side serves the JWKS printed here and sends the tokens; it signs nothing.

Usage: issuer.py ISSUER AUDIENCE. Prints one JSON line: {"jwks": [set before rotation,
set after], "tokens": {case: token}}.
"""

import json
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key, kid):
    jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
    return jwk


def main():
    issuer, audience = sys.argv[1], sys.argv[2]
    first, rotated, stranger = rsa_key(), rsa_key(), rsa_key()
    now = int(time.time())

    def claims(**changes):
        base = {
            "iss": issuer,
            "aud": audience,
            "sub": "reader-subject",
            "iat": now - 10,
            "nbf": now - 10,
            "exp": now + 600,
            "roles": ["Fleet.Read"],
        }
        base.update(changes)
        return {k: v for k, v in base.items() if v is not None}

    def signed(payload, key=first, kid="first"):
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})

    tokens = {
        "read": signed(claims()),
        "admin": signed(claims(sub="admin-subject", roles=["Fleet.Admin"])),
        "no_role": signed(claims(sub="nobody", roles=None)),
        "expired": signed(claims(iat=now - 7200, nbf=now - 7200, exp=now - 3600)),
        # Inside the 60 s clock skew on both ends: accepted.
        "within_skew": signed(claims(exp=now - 20, nbf=now + 20)),
        "not_yet": signed(claims(nbf=now + 3600)),
        "wrong_audience": signed(claims(aud="api://another-api")),
        "wrong_issuer": signed(claims(iss=issuer + "/other")),
        "unsigned": jwt.encode(claims(), None, algorithm="none", headers={"kid": "first"}),
        # Another key under the published kid: the signature does not verify.
        "other_key": signed(claims(), key=stranger, kid="first"),
        "rotated": signed(claims(sub="rotated-subject"), key=rotated, kid="second"),
        "unknown_kid": signed(claims(), key=stranger, kid="made-up"),
    }
    jwks = [
        {"keys": [public_jwk(first, "first")]},
        {"keys": [public_jwk(first, "first"), public_jwk(rotated, "second")]},
    ]
    print(json.dumps({"jwks": jwks, "tokens": tokens}))


if __name__ == "__main__":
    main()
