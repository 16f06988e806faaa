"""Ray's token authentication, as a run sees it: ask a named cluster once whether it takes this process, and say in
one line what to set when it does not (docs/ray-clusters.md, "Token authentication")."""
from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator

from ray.exceptions import AuthenticationError, RayError

from ..errors import ActorError

AUTH_DOC = "docs/ray-clusters.md, \"Token authentication\""


def auth_hint(address: str) -> str:
    """The one line that says what to set when the Ray cluster at `address` refuses this process for want of its
    token (Ray 2.59 and later start clusters with token authentication): which of RAY_AUTH_MODE and the token
    (RAY_AUTH_TOKEN_PATH, RAY_AUTH_TOKEN, ~/.ray/auth_token) is missing or wrong here."""
    mode = os.environ.get("RAY_AUTH_MODE", "")
    where = ("RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else
             f"RAY_AUTH_TOKEN_PATH={os.environ['RAY_AUTH_TOKEN_PATH']}" if os.environ.get("RAY_AUTH_TOKEN_PATH") else
             "~/.ray/auth_token" if os.path.isfile(os.path.expanduser("~/.ray/auth_token")) else None)
    token = ("the cluster's token in RAY_AUTH_TOKEN_PATH=FILE or RAY_AUTH_TOKEN (`ray get-auth-token` on the head "
             "prints it)")
    if mode.lower() != "token":
        need = f"set RAY_AUTH_MODE=token (it is {mode or 'unset'}) and {token}"
    elif where is None:
        need = f"RAY_AUTH_MODE is token but no token was found: set {token}"
    else:
        need = f"the token from {where} is not the cluster's: set {token}"
    return f"the Ray cluster at {address} requires its authentication token: {need}; see {AUTH_DOC}"


def token_missing(address: str | None) -> str | None:
    """Why Ray would refuse or abort this process for want of a token, found before any call into Ray (whose C++
    token loader ends the process with a RAY_CHECK, no message, when it finds none: issue 45), or None. Ray's
    order (docs.ray.io, "Token Authentication", Token Sources and Precedence): RAY_AUTH_TOKEN when set and not
    empty; else RAY_AUTH_TOKEN_PATH, whose file must be readable and not empty (Ray aborts otherwise, a local Ray
    too); else ~/.ray/auth_token. Only with RAY_AUTH_MODE=token; a local Ray (`address` None or "local") makes its
    own token where none is found."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return None
    where = f"reach the Ray cluster at {address}" if address not in (None, "", "local") else "start a local Ray"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if named:
        try:
            with open(named, "rb") as f:
                held = f.read(1 << 16)
        except OSError as err:
            return (f"RAY_AUTH_MODE is token and RAY_AUTH_TOKEN_PATH={named} cannot be read ({err.strerror}), so Ray "
                    f"cannot {where}: set RAY_AUTH_TOKEN_PATH to a readable file holding the cluster's token "
                    f"(`ray get-auth-token` on the head prints it); see {AUTH_DOC}")
        if not held.strip():
            return (f"RAY_AUTH_MODE is token and RAY_AUTH_TOKEN_PATH={named} is empty, so Ray cannot {where}: "
                    f"put the cluster's token in it (`ray get-auth-token` on the head prints it); see {AUTH_DOC}")
        return None
    if address in (None, "", "local"):
        return None
    default = os.path.expanduser("~/.ray/auth_token")
    try:
        with open(default, "rb") as f:
            if f.read(1 << 16).strip():
                return None
        return (f"RAY_AUTH_MODE is token and ~/.ray/auth_token is empty, so Ray cannot {where}: set the cluster's "
                f"token in RAY_AUTH_TOKEN_PATH=FILE or RAY_AUTH_TOKEN (`ray get-auth-token` on the head prints it); "
                f"see {AUTH_DOC}")
    except OSError:
        return auth_hint(address)


def require_token(address: str | None) -> None:
    """ActorError (exit 4, one line) where `token_missing` finds that Ray would refuse or abort this process."""
    why = token_missing(address)
    if why is not None:
        raise ActorError(why)


@contextmanager
def _stderr_held() -> Iterator[list]:
    """What Ray's C++ core writes to file descriptor 2 meanwhile (its one warning line per refused connection) kept
    aside; the caller gets it as a one-item list and decides whether to print it."""
    kept: list[str] = []
    try:
        sys.stderr.flush()
        saved, spool = os.dup(2), tempfile.TemporaryFile()
    except (OSError, ValueError):     # no file descriptor 2 to hold: nothing is held
        yield kept
        return
    os.dup2(spool.fileno(), 2)
    try:
        yield kept
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        spool.seek(0)
        kept.append(spool.read().decode(errors="replace"))
        spool.close()


def probe(address: str) -> None:
    """Ask the cluster's GCS for its id once (about 10 ms) before `ray.init`, whose 20 retries take 20 s to give
    up on a refused token and many minutes on an address where nothing answers: ActorError with `auth_hint`, or
    with the address and Ray's reason when nothing answered; anything else is left to `ray.init`."""
    require_token(address)       # before any call into Ray: its token loader aborts the process without a word
    if "://" in address or address in ("auto", "local") or ":" not in address:
        return
    from ray._raylet import GcsClient

    refused = None
    with _stderr_held() as said:
        try:
            GcsClient(address=address)
        except AuthenticationError:
            refused = auth_hint(address)
        except RayError as err:       # RpcError: nothing answered within Ray's own timeout
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            refused = f"could not connect to Ray at {address}: {(lines[-1] if lines else type(err).__name__)[:300]}"
        except Exception:             # noqa: BLE001 - any other answer is ray.init's to report
            pass
    if refused is None and said and said[0]:
        sys.stderr.write(said[0])
    if refused is not None:
        raise ActorError(refused)
