"""Credentials out of text that xover shows or stores: command lines, lease holders, reports, messages.

A URL may carry a password in its userinfo (`postgresql://user:pw@host/db`) or in a query option
(`?password=pw`, `&sslpassword=pw`, `?token=...`). Wherever a URL can end up where others read it (a
lease file every user can read, a report, the store's own record of the command, an error line), the
password is written as `***`.

A password may hold any character: a space, a quote, '@', '/', a percent escape. So text is not cut at
quotes or spaces by a pattern: it is read as shell words first (a command line is `shlex.join`ed argv,
where a URL with a space or a quote is one quoted word), and each word is masked as a whole - a URL's
password runs to the word's last '@', a query option's value to the next '&'. Text that is not a
command (a message) reads as words just the same; a quote that is never closed is taken as a character.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus

MASK = "***"
# scheme://user:password@ -> scheme://user:***@. The user ends at the first ':' (as SQLAlchemy reads
# it), the password at the word's last '@': an unescaped '@' in a password hides more of the URL,
# never less of the password.
# A scheme is looked for only where a run of a scheme's characters starts (its leading digits or signs are the
# head's, left as they were): a search from every character of a long word was quadratic (40,000 letters: 8 s)
# Slashes past the two count as the scheme's: `postgresql:///user:pw@host/db` (a third typed by mistake) is read by
# SQLAlchemy as a database path and shown in its error, password and all.
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.\-])(?P<head>[0-9+.\-]*[A-Za-z][A-Za-z0-9+.\-]*://+[^:/]*):.*@", re.DOTALL)
# user:password@host... or scheme:/user:password@host... : a URL with its '//' lost (a file path's first part
# holds no ':' before an '@'); or a database's scheme with its ':' lost, postgresql//user:password@host (a
# folder named for a dialect is not a store's). The password runs to the last '@', as it does in a URL: it may
# hold a '/'. Matched at a word's start (a --db, a --tracking-uri): _USERINFO finds none in it
MISTYPED_URL = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9+.\-]*:/+|(?:postgres(?:ql)?|mysql|mariadb|oracle|mssql|cockroachdb)(?:\+\w+)?/+)?"
    r"[^/:@]*:(?P<password>.*)@",
    re.DOTALL | re.IGNORECASE,
)
# the words before `-pass` that name a pass over the data, not a password
_PASSES_OVER_DATA = "first|second|third|last|final|single|one|two|multi|forward|backward|fwd|bwd|no|skip|num"
# the names of options that carry a credential, compared once percent-decoded (SQLAlchemy and libpq
# decode a query's names: `pass%77ord=` is a password too)
_CREDENTIAL_NAME = re.compile(
    r".*(?:passw(?:or)?d|pass[_\-.]?phrase|passcode|secret|credential|authori[sz]ation|bearer|cookie|webhook"
    r"|oauth|jwt).*"  # anywhere: PGPASSWORD, sslpassword, client_secret, --pass-phrase, --passcode,
    # --authorization, Set-Cookie, --slack-webhook (its URL is the secret), --oauth, --jwt-secret
    r"|.*(?:token|(?:api|access|private|account)[_\-.]?keys?|[_\-.]key|[_\-.]sig|signature|[_\-.]creds?|[_\-.]auth"
    r"|[_\-.]pwd?|(?:key|store|pg)pass)"  # last: HF_TOKEN, accessToken, apiKey, --api-keys, --wandb-key,
    # X-Amz-Signature, aws_creds, --hf-auth, --mysql-pwd, --db-pw, keytool's -storepass, PGPASS
    # last, a password's `pass` after a separator (--smtp-pass, --db_pass), but not a pass over the data that
    # a training option counts or orders (--two-pass, --first-pass, --no-pass: a flag, and the next word an option)
    rf"|(?:.*[_\-.])?(?!(?:{_PASSES_OVER_DATA})[_\-.]pass\Z)[^_\-.]*[_\-.]pass"
    r"|pwd|pw|pass|pat|key|sig|auth|creds?",  # alone: ?key= (an API key), ?sig= (a signed URL's), --pat (an access
    # token), --pw
    re.IGNORECASE | re.DOTALL,
)
# scheme://TOKEN@host: a web, git or object-store URL's userinfo without a ':' is a token as often as a user
# name (https://ghp_...@github.com), so all of it is masked; other schemes (ssh://, postgresql://) name a user
_TOKEN_USERINFO = re.compile(
    r"(?P<head>(?:(?<![A-Za-z0-9.\-])[A-Za-z][A-Za-z0-9.\-]*\+)?(?:https?|git|s3|gs|ftps?|wss?)://)"
    r"(?P<token>[^:/@?#\s]+)@",
    re.IGNORECASE,
)
# a word that is a token by its own shape, whatever option it follows (`--hf hf_...`): the prefixes services give
# their tokens, at their lengths (Hugging Face, GitHub, GitLab, OpenAI and Anthropic, Slack, an AWS access key)
_KNOWN_TOKEN = re.compile(
    r"hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{40,}|glpat-[\w\-]{20,}|sk-[\w\-]{20,}"
    r"|xox[abprs]-[\w\-]{10,}|A[KS]IA[0-9A-Z]{16}"
)
# a JSON Web Token, by its shape: base64url `{"` (eyJ) header, '.', payload, '.', signature (empty when unsigned;
# an encrypted one has five parts), wherever it stands in a word (`--header=X-Token:eyJ...`). Its start is the
# start of a run of base64url letters and its runs are possessive: a search from every `eyJ` of `eyJeyJeyJ...`
# that read on to the word's end each time would be quadratic
_JWT = re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]++(?:\.[A-Za-z0-9_\-]*+){1,3}")
# a PEM private key (an argument that is a key file's content, newlines and all): the whole word is the secret
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]++ )*PRIVATE KEY(?: BLOCK)?-----")
# NAME=value parts of one word, each at the word's start or after whitespace: a libpq connection string passed as
# one argument (`--dsn "host=db user=u password=pw"`), its `=` spaced or not and its value unquoted (to the next
# whitespace, a backslash escaping the next letter) or single-quoted (`password = 'a b\'c'`), as libpq reads it
_SPACED_ASSIGNMENT = re.compile(
    r"(?<!\S)(?P<name>(?:-{0,2}|\+{1,2}|~)[A-Za-z_][A-Za-z0-9_.\-]*+)(?P<equals>\s*=\s*)"
    r"(?P<value>'(?:\\.|[^'\\])*+'?|(?:\\.|[^\s\\])*+)",
    re.DOTALL,
)
# an option and its value inside one word (`--extra-args "--password pw --epochs 3"`, a script's arguments passed on
# as one): the value runs to the next option of the word (whitespace then '-'); it starts where a run of spaces
# does, and each of its characters is looked past once
_SPACED_OPTION = re.compile(
    r"(?<!\S)(?P<option>-{1,2}[A-Za-z_][A-Za-z0-9_.\-]*+)(?P<gap>\s++)(?P<value>[^\s\-](?:(?!\s+-)[\s\S])*+)"
)
# the same, a value that starts with '-' (`"--password -x7 --epochs 3"`): one word, as the next argument after a
# credential's option is masked whatever it is; looked for ahead, so an option before it does not take it as its value
_DASHED_VALUE = re.compile(r"(?<!\S)(?P<option>-{1,2}[A-Za-z_][A-Za-z0-9_.\-]*+)(?=(?P<gap>\s++)(?P<value>-\S*+))")
# a header as a word: `Authorization: Bearer X`, `X-Api-Key: X`, `Cookie: a=b` (curl's -H, a --header)
_HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9\-_]*)\s*:\s+(?P<value>.+)$", re.DOTALL)
# a scheme of HTTP authentication and its credential, within a word: `Bearer X`, `Basic X`
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s+(?P<value>[^\s,]+)", re.IGNORECASE)
# NAME=value after '?', '&' or ';' (a URL's query options, libpq's and SQLAlchemy's); the value runs to
# the next '&', the only separator SQLAlchemy's parse_qsl splits on ('#' and ';' are the value's)
_QUERY_OPTION = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;?#]+)=(?P<value>[^&]*)")
# a whole word NAME=value or --name=value (an assignment, an option), or a Hydra override that adds, forces or
# deletes one (+db.password=..., ++wandb.api_key=..., ~key=...): the value runs to the word's end
_ASSIGNMENT = re.compile(r"^(?P<name>(?:-{0,2}|\+{1,2}|~)[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.*)$", re.DOTALL)
# what stands between a quoted key and its quoted value in a JSON or a Python dict's text
_PAIR_COLON = re.compile(r"\s*:\s*")
# an option whose value is `user:password` (curl's and wget's --user, a proxy's): the part after the first ':'
_USER_PASSWORD_OPTIONS = frozenset({"--user", "-u", "--proxy-user", "-U", "--http-user", "--userpwd"})


def credential_name(name: str) -> bool:
    """Whether an option or variable of this name carries a credential (password, sslpassword, HF_TOKEN,
    api_key, ...), its name percent-decoded as SQLAlchemy and libpq decode it (and a Hydra override's +, ++ or ~
    before it)."""
    return _CREDENTIAL_NAME.fullmatch(unquote_plus(name).lstrip("-+~")) is not None


def mask_word(word: str) -> str:
    """One word (an argument, a URL) with every password in it shown as ***."""
    if _KNOWN_TOKEN.fullmatch(word):
        return MASK
    assignment = _ASSIGNMENT.match(word)
    if (
        assignment
        and assignment["value"]
        and (
            credential_name(assignment["name"])
            or _KNOWN_TOKEN.fullmatch(assignment["value"])
            or _PRIVATE_KEY.search(assignment["value"])
        )
    ):
        return f"{assignment['name']}={MASK}"
    if _PRIVATE_KEY.search(word):
        return MASK
    header = _HEADER.match(word)
    if header and credential_name(header["name"]):
        return f"{header['name']}: {MASK}"
    colon = _userinfo(word)
    if colon:  # one at most: its password runs to the word's last '@'
        word = f"{word[: colon.start()]}{colon['head']}:{MASK}@{word[colon.end() :]}"
    else:
        word = _TOKEN_USERINFO.sub(rf"\g<head>{MASK}@", word)
    word = _AUTH_SCHEME.sub(rf"\g<scheme> {MASK}", word)

    def option(found: re.Match[str]) -> str:
        if not found["value"] or not credential_name(found["name"]):
            return found[0]
        return f"{found['sep']}{found['name']}={MASK}"

    def spaced(found: re.Match[str]) -> str:
        if not found["value"] or not credential_name(found["name"]):
            return found[0]
        return f"{found['name']}{found['equals']}{MASK}"

    word = _QUERY_OPTION.sub(option, word)

    def option_value(found: re.Match[str]) -> str:
        if not _names_a_credential(found["option"]):
            return found[0]
        return f"{found['option']}{found['gap']}{MASK}"

    word = _SPACED_ASSIGNMENT.sub(spaced, word)
    if ":" in word:
        word = _masked_quoted_pairs(word)
    if any(char.isspace() for char in word):
        word = _masked_dashed_values(_SPACED_OPTION.sub(option_value, word))
    return _JWT.sub(MASK, word)


def _quoted_spans(word: str) -> list[tuple[int, int]]:
    """The quoted strings of `word` ("..." or '...', a backslash escaping the next letter), left to right, each as
    (start, end) with its quotes. One pass: a quote never closed is a letter, and so is every later quote of its
    kind (none closes either), so no stretch of the word is read again from each of its quotes."""
    spans: list[tuple[int, int]] = []
    never_closed: set[str] = set()
    index, length = 0, len(word)
    while index < length:
        quote_mark = word[index]
        if quote_mark not in "\"'" or quote_mark in never_closed:
            index += 1
            continue
        end = index + 1
        while end < length and word[end] != quote_mark:
            end += 2 if word[end] == "\\" else 1
        if end >= length:
            never_closed.add(quote_mark)
            index += 1
            continue
        spans.append((index, end + 1))
        index = end + 1
    return spans


def _masked_quoted_pairs(word: str) -> str:
    """`word` (a JSON or a Python dict's text given as one argument: --cfg '{"api_key": "..."}') with the quoted
    value of each quoted key named for a credential shown as ***."""
    pieces, kept_to = [], 0
    spans = _quoted_spans(word)
    for (key_start, key_end), (value_start, value_end) in zip(spans, spans[1:]):
        if (
            value_end - value_start > 2
            and _PAIR_COLON.fullmatch(word, key_end, value_start)
            and credential_name(word[key_start + 1 : key_end - 1])
        ):
            quote_mark = word[value_start]
            pieces += [word[kept_to:value_start], f"{quote_mark}{MASK}{quote_mark}"]
            kept_to = value_end
    return "".join(pieces) + word[kept_to:]


def _masked_dashed_values(word: str) -> str:
    """`word` with the dash-led value after each credential's option inside it (`--password -x7`) shown as ***."""
    pieces, kept_to = [], 0
    for found in _DASHED_VALUE.finditer(word):
        if found.start() >= kept_to and _names_a_credential(found["option"]):
            pieces += [word[kept_to : found.end("gap")], MASK]
            kept_to = found.end("value")
    return "".join(pieces) + word[kept_to:]


def _userinfo(word: str) -> re.Match[str] | None:
    """`scheme://user:password@` in `word`, looked for no further than its last '@' (where the password ends): a
    ':' after it, tried from each scheme, was read to the word's end each time."""
    last_at = word.rfind("@")
    return _USERINFO.search(word, 0, last_at + 1) if last_at != -1 else None


def mask_argv(argv: Sequence[str]) -> list[str]:
    """An argument list with every password in it shown as ***, one argument at a time, and the value after
    an option named for a credential (`--password pw`, `--hf-token tok`) or naming `user:password` (`--user`)."""
    return [_masked_after(previous, arg) for previous, arg in zip(["", *argv], argv)]


def _masked_after(previous: str, word: str) -> str:
    """`word` masked, as the value of the option `previous` where it is one."""
    if _names_a_credential(previous):
        return MASK
    if previous in _USER_PASSWORD_OPTIONS:
        return _user_password_masked(word)
    assignment = _ASSIGNMENT.match(word)
    if assignment and assignment["name"] in _USER_PASSWORD_OPTIONS:  # --user=bob:pw
        return f"{assignment['name']}={_user_password_masked(assignment['value'])}"
    return mask_word(word)


def _user_password_masked(value: str) -> str:
    """`user:password` as `user:***` (a value without ':' names a user only)."""
    user, colon, password = value.partition(":")
    return f"{user}:{MASK}" if colon and password else mask_word(value)


def holds_credentials(argv: Sequence[str]) -> bool:
    """Whether an argument list carries a credential that mask_argv would hide."""
    return mask_argv(argv) != list(argv)


def _names_a_credential(word: str) -> bool:
    """An option that takes its value as the next word, named for a credential: `--password`, `-api-key`."""
    if word.lower() == "bearer":  # `Bearer X` as two words of a message
        return True
    # one word: a word of several (`--password pw --epochs 3`, passed on as one) is no option of the next
    return word.startswith("-") and "=" not in word and not any(c.isspace() for c in word) and credential_name(word)


def _shell_words(text: str) -> Iterator[tuple[int, int, str]]:
    """Each word of `text` as a shell reads it: (start, end, its value without quotes). A quote that is
    never closed is a character of its word."""
    index, length = 0, len(text)
    while index < length:
        if text[index].isspace():
            index += 1
            continue
        start, value = index, list[str]()
        while index < length and not text[index].isspace():
            char = text[index]
            if char == "'" and (close := text.find("'", index + 1)) != -1:
                value.append(text[index + 1 : close])
                index = close + 1
            elif char == '"' and (quoted := _double_quoted(text, index)) is not None:
                part, index = quoted
                value.append(part)
            elif char == "\\" and index + 1 < length:
                value.append(text[index + 1])
                index += 2
            else:
                value.append(char)
                index += 1
        yield start, index, "".join(value)


def _double_quoted(text: str, opening: int) -> tuple[str, int] | None:
    """The value of a "..." part starting at `opening`, and the index after its closing quote; None if
    it is never closed."""
    part: list[str] = []
    index = opening + 1
    while index < len(text):
        char = text[index]
        if char == '"':
            return "".join(part), index + 1
        if char == "\\" and index + 1 < len(text) and text[index + 1] in '"\\$`\n':
            part.append(text[index + 1])
            index += 2
            continue
        part.append(char)
        index += 1
    return None


def mask_credentials(text: str) -> str:
    """`text` (a joined command line, a lease holder, a message) with every password in it shown as ***.
    A word that holds one is written back quoted as the shell would read it, if it was quoted."""
    pieces, kept_until, previous = [], 0, ""
    for start, end, value in _shell_words(text):
        masked = _masked_after(previous, value) if value else value
        previous = value
        if masked == value:
            continue
        written = text[start:end]
        pieces += [text[kept_until:start], masked if written == value else shlex.quote(masked)]
        kept_until = end
    return "".join(pieces) + text[kept_until:]


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The values mask_argv shows as ***, as typed: what a message that repeats the arguments (argparse's
    'unrecognized arguments: ...') must not show."""
    found: list[str] = []
    for typed, shown in zip(argv, mask_argv(argv)):
        if shown == typed:
            continue
        kept = shown.split(MASK)  # the word's parts mask_argv kept, a secret between each two
        if hidden := re.fullmatch("(.*?)".join(map(re.escape, kept)), typed, re.DOTALL):
            found += hidden.groups()
        else:  # a word masked around its quotes: all of it
            found.append(typed)
    return found


MIN_SECRET_CHARS = 4  # shorter values are not looked for in a text: their letters are all over it (as url_secrets)


def secret_forms(secrets: Iterable[str]) -> list[str]:
    """The forms in which `secrets` may be repeated in a job's output, longest first: each as given, each line of
    one of several (a PEM key, JSON credentials: a launcher prefixes every line it relays), each as read with
    undecodable bytes replaced (a value of the environment that is not UTF-8), and each as a script may print it
    escaped or decoded: inside a JSON string (json.dumps, ASCII or not), a repr, an ascii(), a bytes' repr, and
    percent-decoded (a URL's password as the script's driver reads it). Forms shorter than MIN_SECRET_CHARS are
    left out."""
    forms = set()
    for secret in secrets:
        for form in (secret, *secret.splitlines()):
            forms |= {form, form.encode("utf-8", "surrogateescape").decode("utf-8", "replace")}
    forms |= {escaped for form in list(forms) for escaped in _escaped_forms(form)}
    return sorted((form for form in forms if len(form.strip()) >= MIN_SECRET_CHARS), key=len, reverse=True)


def _escaped_forms(form: str) -> set[str]:
    """`form` as printed inside quotes by json.dumps, repr, ascii and a bytes' repr, and percent-decoded."""
    encoded = form.encode("utf-8", "surrogateescape")
    return {
        json.dumps(form)[1:-1],
        json.dumps(form, ensure_ascii=False)[1:-1],
        repr(form)[1:-1],
        ascii(form)[1:-1],
        repr(encoded)[2:-1],
        unquote(form),
        unquote_plus(form),
    }


def without_values(text: str, secrets: Iterable[str]) -> str:
    """`text` (a job's error, which may repeat its arguments or environment) with every password in it and each
    of `secrets` (secret_forms) shown as ***."""
    text = mask_credentials(text)
    for form in secret_forms(secrets):
        text = text.replace(form, MASK)
    return text


def mask_command(argv: Sequence[str]) -> str:
    """An argument list joined as a shell command line (shlex.join), its passwords shown as ***."""
    return shlex.join(mask_argv(argv))


def url_secrets(url: str) -> list[str]:
    """What of `url` is secret - its userinfo's password (to the first '@', as SQLAlchemy reads it, and to the
    last), its credential options' values - as typed and percent-decoded, longest first: what a message
    about the URL (a driver's, a server's) must not repeat. Parts shorter than 4 characters are left out:
    masking them would mask their letters all over a message."""
    found: set[str] = set()
    userinfo = _userinfo(url)
    if userinfo:
        after_user = url[userinfo.end("head") + 1 :]
        password = after_user[: after_user.rfind("@")]
        # and each piece of it between two '@', and what follows each '@': a driver that read the first '@' as
        # the host's start names the rest as a host ('failed to resolve host ...'), where a piece of a few
        # letters, too short to mask alone, would show
        found |= {password, *password.split("@")}
        found |= {password.split("@", count)[-1] for count in range(1, password.count("@") + 1)}
    elif token := _TOKEN_USERINFO.search(url):
        found.add(token["token"])
    if "?" in url:
        for name, value in parse_qsl(url.split("?", 1)[1], keep_blank_values=True):
            if credential_name(name):
                found.add(value)
    found |= {unquote(secret) for secret in found} | {quote(secret, safe="") for secret in found}
    found |= {quote_plus(secret) for secret in found}
    return sorted((secret for secret in found if len(secret) >= MIN_SECRET_CHARS), key=len, reverse=True)


def without_secrets_of(url: str, text: str) -> str:
    """`text` (a message about `url`) with every password in it masked, and every secret part of `url`
    (url_secrets) wherever it is repeated."""
    text = mask_credentials(text)
    for secret in url_secrets(url):
        text = text.replace(secret, MASK)
    return text
