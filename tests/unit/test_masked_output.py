"""What a launcher's log keeps of a job's secrets (run/supervise.py: MaskedOutput, redact.secret_forms), and what a
job's error keeps (Recipe.secrets): a review of 2026-12-06 found a secret split over two full reads written
whole, a secret of several lines never matched under a launcher's prefixes, and every `env` setting masked."""

import os

from xover.recipes import Recipe
from xover.run.supervise import MAX_LINE_BYTES, MaskedOutput


def _through(masked: MaskedOutput, chunks: list[bytes]) -> bytes:
    return b"".join(masked.feed(chunk) for chunk in chunks) + masked.feed(b"", last=True)


def test_a_secret_split_over_two_full_reads_of_heavy_output_is_masked():
    secret = "kx7-secret-value"
    output = b"".join(f"line {n} of a configuration dump\n".encode() for n in range(3000))
    output += f"token={secret}\n".encode() + output
    start = output.index(secret.encode()) + 5  # the read ends inside the secret
    chunks = [output[i : i + 65536] for i in range(0, start - start % 65536, 65536)]
    chunks += [output[len(b"".join(chunks)) : start], output[start:]]
    written = _through(MaskedOutput([secret]), chunks)
    assert secret.encode() not in written and written.count(b"token=***\n") == 1
    assert written.replace(b"token=***\n", b"") == output.replace(f"token={secret}\n".encode(), b"")


def test_a_line_that_never_ends_is_written_in_parts_without_cutting_a_secret():
    secret = "kx7-secret-value"
    masked = MaskedOutput([secret])
    head = b"x" * (MAX_LINE_BYTES + 10)
    first = masked.feed(head + secret.encode()[:6])
    assert first and len(first) <= len(head) and secret.encode()[:6] not in first  # written, its end held back
    rest = masked.feed(secret.encode()[6:] + b" and on") + masked.feed(b"", last=True)
    assert first + rest == head + b"*** and on"


def test_each_line_of_a_secret_of_several_is_masked_under_a_launchers_prefixes():
    key = "-----BEGIN KEY-----\nMIIBkx7firstline\nkx7secondline==\n-----END KEY-----"
    relayed = b"".join(b"[1]<stderr>:" + line.encode() + b"\n" for line in key.splitlines())
    written = _through(MaskedOutput([key]), [relayed])
    assert b"MIIBkx7firstline" not in written and b"kx7secondline==" not in written
    assert written.startswith(b"[1]<stderr>:***\n")


def test_short_values_stay_and_without_secrets_output_passes_at_once():
    assert _through(MaskedOutput(["abc"]), [b"abc abcd\n"]) == b"abc abcd\n"
    assert MaskedOutput([]).feed(b"no line end") == b"no line end"


def test_a_value_of_the_environment_that_is_not_utf8_is_masked_and_breaks_nothing():
    """Such a `pass_env` value (os.environ's surrogates) made `.encode()` raise: the job never started, and its
    stored start error, the exception's repr, held the value."""
    value = os.fsdecode(b"p\xe4sswort-secret")
    written = _through(MaskedOutput([value]), [b"key p\xe4sswort-secret\n"])
    assert written == b"key ***\n"


def test_a_jobs_error_keeps_its_env_settings_and_masks_what_is_named_or_shaped_as_a_credential(monkeypatch):
    from xover.redact import without_values

    monkeypatch.setenv("HF_TOKEN", "kx7-passed-value")
    recipe = Recipe(name="j", model="script", dataset="script", batch_size=1, optimizer="sgd", lr=0.1, np=2, seed=0,
                    script="t.py", args=("--api-key", "kx7-argument"), engine="torch",
                    env={"NCCL_DEBUG": "INFO", "DATA": "/data/train", "WANDB_API_KEY": "kx7-wandb-value",
                         "MY_SETTING": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
                    pass_env=("HF_TOKEN",))
    error = ("INFO: reading /data/train with kx7-argument, kx7-wandb-value, kx7-passed-value and "
             "ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    assert without_values(error, recipe.secrets) == "INFO: reading /data/train with ***, ***, *** and ***"
