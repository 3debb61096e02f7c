"""The keys that seal stored runs: a `KeyRing` made from the state key(s), and `state_keys`, which finds them.

A ring is one or more operator secrets (each at least 32 bytes: str, taken as its UTF-8 bytes, or bytes).
The first seals, every one opens, so keys rotate without a stop: put the new key first, re-seal the store
(`branchc runs rekey`), then drop the old one. `--state-key` / `BRANCHC_STATE_KEY` lists several keys
separated by commas (`NEW,OLD`; spaces around a comma are ignored), so a key itself has no comma (a
generated key, `python -c "import secrets; print(secrets.token_urlsafe(32))"`, never has one).

Each secret is stretched with HKDF-SHA256 for the purpose "branchc store record" into an AES-256-GCM key;
that key is of no other use (the `mcp` SDK's request_state sealing derives its own from the same secret, for
its own purpose). Every sealed value carries the id of the key that sealed it: 16 hex digits of a hash of
that derived key, which tells the key without giving anything of it away.

Without a state key, `state_keys(None, folder)` makes one, once, and keeps it in FOLDER/state.key (mode 0600,
in a folder of mode 0700), so a restarted server opens what it sealed before. A key file that group or
others may read is refused: a key that was readable is no longer a secret (make a new one and rotate).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .base import StoreError

__all__ = ["KEY_FILE", "MIN_KEY_BYTES", "SEPARATOR", "KeyRing", "StoreKeyError", "private_folder", "state_keys"]

MIN_KEY_BYTES = 32
SEPARATOR = ","
KEY_FILE = "state.key"
PURPOSE = b"branchc store record"
_KDF_INFO = PURPOSE + b"/v1/aes-256-gcm"
_KID_INFO = PURPOSE + b"/v1/key-id:"
_NAME_INFO = PURPOSE + b"/v1/names"
NONCE_BYTES = 12
TAG_BYTES = 16
GENERATE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


class StoreKeyError(StoreError, ValueError):
    """A state key that cannot seal: too short, empty, duplicated, or kept where others can read it."""


class SealError(Exception):
    """A sealed value that does not open under the ring (internal: the stores turn it into a StoreDataError
    naming the run)."""

    def __init__(self, reason: str, key_id: str) -> None:
        self.reason = reason  # "unknown key" or "seal"
        self.key_id = key_id
        super().__init__(reason)


class KeyRing:
    """Secrets that seal stored records: the first seals, all open. `KeyRing.parse("NEW,OLD")` reads the
    `--state-key` form; `KeyRing.generate()` makes a ring of one fresh key."""

    __slots__ = ("_aead", "_names", "ids", "secrets")

    def __init__(self, keys: Iterable[str | bytes]) -> None:
        if isinstance(keys, (str, bytes, bytearray)):
            raise TypeError("KeyRing takes a list of keys; for the --state-key form (KEY,KEY) use KeyRing.parse")
        material: list[bytes] = []
        for index, key in enumerate(keys):
            if isinstance(key, str):
                raw = key.encode()
            elif isinstance(key, (bytes, bytearray)):
                raw = bytes(key)
            else:
                raise TypeError(f"a state key is str or bytes, not {type(key).__name__} (key {index + 1})")
            if len(raw) < MIN_KEY_BYTES:
                raise StoreKeyError(
                    f"state key {index + 1} is {len(raw)} bytes, and a state key is at least {MIN_KEY_BYTES} bytes "
                    f"of secret randomness; make one with: {GENERATE}"
                )
            material.append(raw)
        if not material:
            raise StoreKeyError(f"a key ring needs at least one state key; make one with: {GENERATE}")
        aead: dict[str, AESGCM] = {}
        names: dict[str, bytes] = {}
        ids: list[str] = []
        for index, raw in enumerate(material):
            derived = HKDF(algorithm=SHA256(), length=32, salt=None, info=_KDF_INFO).derive(raw)
            kid = hashlib.sha256(_KID_INFO + derived).hexdigest()[:16]
            if kid in aead:
                raise StoreKeyError(f"state key {index + 1} is given twice; list each key once")
            aead[kid] = AESGCM(derived)
            names[kid] = HKDF(algorithm=SHA256(), length=32, salt=None, info=_NAME_INFO).derive(raw)
            ids.append(kid)
        self.secrets: tuple[bytes, ...] = tuple(material)  # as given: what request_state sealing is made from
        self.ids: tuple[str, ...] = tuple(ids)
        self._aead = aead
        self._names = names

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """The ring `--state-key` / `BRANCHC_STATE_KEY` gives: keys separated by commas, the sealing one first."""
        if not isinstance(text, str):
            raise TypeError(f"a --state-key value is text, not {type(text).__name__}")
        parts = [part.strip() for part in text.split(SEPARATOR)]
        if not text.strip():
            raise StoreKeyError(f"the state key is empty; make one with: {GENERATE}")
        if any(not part for part in parts):
            raise StoreKeyError(
                f"the state key list has an empty entry (keys are separated by {SEPARATOR!r}: NEW,OLD); "
                f"remove the extra comma"
            )
        return cls(parts)

    @classmethod
    def generate(cls) -> KeyRing:
        return cls([secrets.token_urlsafe(32)])

    @property
    def sealing_id(self) -> str:
        """The id of the key that seals (the first)."""
        return self.ids[0]

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        """nonce + AES-256-GCM(plaintext, aad) under the first key (whose id the caller stores beside it)."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead[self.ids[0]].encrypt(nonce, plaintext, aad)

    def open(self, key_id: str, sealed: bytes, aad: bytes) -> bytes:
        """The plaintext of `sealed` (sealed under the key `key_id`, with `aad`); SealError when the ring has no
        such key, or the value or its associated data are not exactly what was sealed."""
        aead = self._aead.get(key_id)
        if aead is None:
            raise SealError("unknown key", key_id)
        if len(sealed) < NONCE_BYTES + TAG_BYTES:
            raise SealError("seal", key_id)
        try:
            return aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
        except InvalidTag:
            raise SealError("seal", key_id) from None

    def name(self, data: bytes, key_id: str | None = None) -> str:
        """A name for `data` that only a holder of the key `key_id` (default: the sealing one) can make or
        check (HMAC-SHA256 under a key of its own, 128 bits as hex): what a store may show in clear in
        place of a digest of sealed content, which would let a reader confirm a guess of it."""
        return hmac.new(self._names[key_id or self.ids[0]], data, hashlib.sha256).hexdigest()[:32]

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"KeyRing(ids={list(self.ids)!r})"  # never the secrets


def _open_to_others(mode: int) -> bool:
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


def private_folder(folder: Path, what: str) -> Path:
    """`folder`, created with mode 0700 when missing; an existing one open to group or others is made 0700
    when this user owns it, else refused (StoreKeyError naming it and the fix)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = folder.stat()
    if _open_to_others(found.st_mode):
        if found.st_uid != os.geteuid():
            raise StoreKeyError(
                f"{what} {folder} may be read or written by others (mode {stat.S_IMODE(found.st_mode):04o}) and "
                f"belongs to another user (uid {found.st_uid}), so branchc cannot make it private: `chmod 700` it "
                f"as its owner, or choose another folder ($BRANCHC_STATE_DIR)"
            )
        os.chmod(folder, 0o700)
    return folder


def state_keys(given: str | None, state_dir: str | Path) -> KeyRing:
    """The ring that seals stored runs: the keys `given` (the `--state-key` / `BRANCHC_STATE_KEY` text,
    comma-separated, the sealing one first), else the key kept in `state_dir`/state.key, made there once
    (mode 0600, the folder 0700) when there is none. StoreKeyError says what is wrong and the fix."""
    if given is not None and given.strip():
        return KeyRing.parse(given)
    folder = private_folder(Path(state_dir).expanduser(), "the state folder")
    path = folder / KEY_FILE
    if not path.exists():
        _make_key_file(folder, path)
    return _read_key_file(path)


def _make_key_file(folder: Path, path: Path) -> None:
    """A new key in `path`, written whole before it appears (two servers starting at once keep one key)."""
    fd, tmp = tempfile.mkstemp(prefix=".state.key.", dir=folder)  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: its key is the key
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _read_key_file(path: Path) -> KeyRing:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(file.fileno())
        if _open_to_others(found.st_mode):
            raise StoreKeyError(
                f"the key file {path} may be read by others (mode {stat.S_IMODE(found.st_mode):04o}): a key others "
                f"could read is no secret any more. Make a new key: give it first with the old one after it "
                f"(--state-key NEW,OLD), run `branchc runs rekey`, then remove {path} (or `chmod 600` it if no one "
                f"else could have read it)"
            )
        if not stat.S_ISREG(found.st_mode):
            raise StoreKeyError(f"the key file {path} is not a regular file; remove it to make a new key")
        text = file.read(64 * 1024)
    try:
        return KeyRing.parse(text.decode())
    except UnicodeDecodeError:
        raise StoreKeyError(f"the key file {path} is not text; remove it to make a new key") from None
    except StoreKeyError as error:
        raise StoreKeyError(f"the key file {path}: {error}") from None
