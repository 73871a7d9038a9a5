"""What lets Prometheus, and only Prometheus, read a run's figures, from xover and nobody else.

The run's exporter (run/exporter.py) and every turn server (turns/metrics.py) serve HTTPS with the user's
own TLS certificate, and answer only a request that carries the user's bearer token. Prometheus is told
both (docs/reference.md, *Prometheus metrics*): it checks the certificate (`tls_config`: `ca_file` the
certificate itself, `server_name` CERTIFICATE_NAME) and sends the token (`authorization`,
`credentials_file`). So a process of another user that holds a metrics port (between two runs, say)
cannot answer as xover: Prometheus refuses its certificate before it sends the token, and records none of
its series; and nobody who reaches a port without the token reads the figures.

They live in one folder of the user's (XOVER_METRICS_CREDENTIALS, else ~/.config/xover/metrics), made on
first use: the folder 0700, `token` (random) and `tls.key` 0600, `tls.crt` (self-signed, made with the
`openssl` program) 0600 too. A folder or file that is a link, another user's, or open to others is
refused with one line that says what to do. A turn server gets them from its launcher on its stdin (over
ssh for another host), never on a command line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import ssl
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import XoverError
from ..settings import METRICS_CREDENTIALS_VARIABLE, settings

CERTIFICATE_NAME = "xover-metrics"  # the name the certificate is made for: Prometheus' tls_config server_name
TOKEN_FILE, CERTIFICATE_FILE, KEY_FILE = "token", "tls.crt", "tls.key"
MAX_FILE_BYTES = 65536  # a token, a certificate or a key is far shorter
CERTIFICATE_DAYS = 36500  # the certificate is pinned by Prometheus' configuration, not trusted through a CA


@dataclass(frozen=True)
class MetricsCredentials:
    """The bearer token a scrape must carry, and the TLS certificate and key the metrics are served with (PEM)."""

    token: str
    certificate: str
    key: str

    def to_line(self) -> str:
        """One line of JSON: how a launcher hands them to a turn server (on its stdin)."""
        return json.dumps({"token": self.token, "certificate": self.certificate, "key": self.key})

    @classmethod
    def from_line(cls, line: str) -> MetricsCredentials:
        """The credentials `to_line` wrote; ValueError for anything else."""
        data = json.loads(line)
        if not isinstance(data, dict) or not all(
            isinstance(data.get(key), str) for key in ("token", "certificate", "key")
        ):
            raise ValueError("expected a JSON object with token, certificate and key")
        return cls(_checked_token(data["token"]), data["certificate"], data["key"])

    def tls_context(self) -> ssl.SSLContext:
        """A server's TLS context with the certificate and key (TLS 1.2 or later)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # ssl loads a certificate and key from files only: written for the moment into a new private folder
        with _private_scratch() as folder:
            certificate, key = folder / CERTIFICATE_FILE, folder / KEY_FILE
            _write_new(certificate, self.certificate)
            _write_new(key, self.key)
            try:
                context.load_cert_chain(certificate, key)
            except ssl.SSLError as error:
                raise XoverError(
                    f"the metrics' TLS certificate or key cannot be used ({error.reason or error})"
                ) from None
        return context


def credentials_folder() -> Path:
    """XOVER_METRICS_CREDENTIALS, else the user's configuration folder's xover/metrics."""
    chosen = settings().metrics_credentials
    if chosen is not None:
        return chosen
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "xover" / "metrics"


def metrics_credentials(create: bool = True) -> MetricsCredentials:
    """The user's metrics credentials, from their folder (made, with new ones, where missing and `create`).
    An XoverError that names the folder or file and what to do for one that is not safe to use."""
    folder = credentials_folder()
    if create:
        _make_folder(folder)
    descriptor = _open_folder(folder)
    try:
        _lock(descriptor, exclusive=create)
        if create:
            _complete(descriptor, folder)
        try:
            token = _checked_token(_read(descriptor, folder, TOKEN_FILE))
        except ValueError:
            raise _refuse(folder / TOKEN_FILE, "holds no token (printable ASCII, without spaces)") from None
        return MetricsCredentials(
            token, _read(descriptor, folder, CERTIFICATE_FILE), _read(descriptor, folder, KEY_FILE)
        )
    finally:
        os.close(descriptor)


def _lock(descriptor: int, exclusive: bool) -> None:
    """One run makes what the folder lacks while the others wait, and none reads a pair half made (the key
    and the certificate are two files: linking each whole is not enough). Released when it is closed. A
    file system that cannot lock a folder (NFS emulates flock with locks that need a file open for
    writing) goes without: each file is still linked whole, and a mixed pair is then refused when served."""
    with contextlib.suppress(OSError):
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)


def _checked_token(token: str) -> str:
    token = token.strip()
    if not token or len(token) > 4096 or not all(33 <= ord(c) <= 126 for c in token):
        raise ValueError("a token is printable ASCII without spaces")
    return token


def _refuse(path: Path, problem: str) -> XoverError:
    return XoverError(
        f"{path}, of the metrics' credentials, {problem}; set {METRICS_CREDENTIALS_VARIABLE} to a folder of your own"
    )


def _make_folder(folder: Path) -> None:
    try:
        os.makedirs(folder.parent, mode=0o700, exist_ok=True)
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise _refuse(folder, f"cannot be created ({error.strerror})") from None


def _open_folder(folder: Path) -> int:
    """The folder, opened without following a link, if it is this user's and open to nobody else."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _refuse(folder, "does not exist (`xover run --metrics-port` makes it)") from None
    except OSError as error:
        raise _refuse(folder, f"cannot be opened ({error.strerror}; a link is not followed)") from None
    info = os.fstat(descriptor)
    if info.st_uid != os.geteuid():
        os.close(descriptor)
        raise _refuse(folder, f"belongs to uid {info.st_uid}, not to you")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.close(descriptor)
        raise _refuse(folder, f"is open to others (mode {stat.S_IMODE(info.st_mode):o}): chmod 700 it")
    return descriptor


def _read(descriptor: int, folder: Path, name: str) -> str:
    """A file of the folder, if it is a regular file of this user's that nobody else can read or write."""
    path = folder / name
    try:
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=descriptor)
    except FileNotFoundError:
        raise _refuse(path, "is missing (remove the folder and `xover run --metrics-port` makes a new one)") from None
    except OSError as error:
        raise _refuse(path, f"cannot be opened ({error.strerror}; a link is not followed)") from None
    try:
        info = os.fstat(file)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise _refuse(path, "is not a file of yours")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise _refuse(path, f"is open to others (mode {stat.S_IMODE(info.st_mode):o}): chmod 600 it")
        data = os.read(file, MAX_FILE_BYTES + 1)
    finally:
        os.close(file)
    if len(data) > MAX_FILE_BYTES:
        raise _refuse(path, f"is longer than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise _refuse(path, "is not ASCII text") from None


def _complete(descriptor: int, folder: Path) -> None:
    """Make what the folder lacks: a token, and a certificate with its key (only both together)."""
    if not _exists(descriptor, TOKEN_FILE):
        _publish(descriptor, folder, {TOKEN_FILE: secrets.token_urlsafe(32)})
    if not _exists(descriptor, CERTIFICATE_FILE) and not _exists(descriptor, KEY_FILE):
        _publish(descriptor, folder, _new_certificate())


def _exists(descriptor: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=descriptor, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _publish(descriptor: int, folder: Path, files: dict[str, str]) -> None:
    """Each file written whole under a temporary name, then linked under its own (under the folder's lock:
    a run of an older xover, or a user's hand, may still write beside it; the first file stays)."""
    for name, text in files.items():
        temporary = f".{name}.{secrets.token_hex(8)}"
        file = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=descriptor
        )
        try:
            os.write(file, text.encode())
        finally:
            os.close(file)
        try:
            os.link(temporary, name, src_dir_fd=descriptor, dst_dir_fd=descriptor, follow_symlinks=False)
        except FileExistsError:
            pass  # another run made it first: its file is the one used
        except OSError as error:
            raise _refuse(folder / name, f"cannot be written ({error.strerror})") from None
        finally:
            os.unlink(temporary, dir_fd=descriptor)


def _new_certificate() -> dict[str, str]:
    """A new self-signed certificate for CERTIFICATE_NAME and its key (P-256), made by `openssl`."""
    program = shutil.which("openssl")
    if program is None:
        raise XoverError(
            "the metrics are served over TLS, and its certificate is made with the `openssl` program, which is not "
            f"installed: install it (Debian: apt install openssl), or put your own {CERTIFICATE_FILE} and {KEY_FILE} "
            f"(for the name {CERTIFICATE_NAME}) in {credentials_folder()}"
        )
    with _private_scratch() as folder:
        made = subprocess.run(
            [program, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(folder / KEY_FILE), "-out", str(folder / CERTIFICATE_FILE), "-days", str(CERTIFICATE_DAYS),
             "-subj", f"/CN={CERTIFICATE_NAME}", "-addext", f"subjectAltName=DNS:{CERTIFICATE_NAME}"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if made.returncode != 0:
            detail = (made.stderr.strip().splitlines() or ["no output"])[-1]
            raise XoverError(f"openssl could not make the metrics' TLS certificate ({detail})")
        return {name: (folder / name).read_text() for name in (KEY_FILE, CERTIFICATE_FILE)}


@contextlib.contextmanager
def _private_scratch() -> Iterator[Path]:
    """A new folder of mode 0700 (tempfile.mkdtemp), removed with what it holds afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="xover-metrics-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_new(path: Path, text: str) -> None:
    file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(file, text.encode())
    finally:
        os.close(file)
