"""Text from outside made safe where it lands: secrets masked, terminals spared escapes.

Why one leaf module (it imports nothing of ours): every layer prints or stores text that
may hold a credential or a byte a terminal obeys, and the rule must be the same
everywhere, so one function decides each:

* :func:`mask_secrets`: every URL in a text keeps its shape but not its secrets. The
  password of ``user:password@`` becomes ``***``, and so does the value of every query or
  fragment parameter whose name says it holds one (``password``, ``passwd``, ``pwd``,
  ``pass``, ``sslpassword``, ``token``, ``access_token``, ``secret``, ``key``, ``api_key``,
  ``apikey``, ``auth``, ``credential``, ``signature``... in any case), and so does such a
  parameter outside a URL (a server echoing a request path, ``password=`` of a libpq
  connection string). Used by every error
  line and crash file (``evolve/cli/main.py``), log line, archive row (a run's stored
  configuration), report page and ``--print-config``. A bare ``user@`` is kept: it names
  an account, not a secret.
* :func:`strip_userinfo`: the LLM endpoint's URL without ``user:password@``: never stored,
  never sent (an HTTP client would send it as Basic auth in place of the bearer key).
* :func:`printable`: control characters (C0, DEL, C1), bidirectional overrides and line
  separators shown as ``\\x1b``, ``\\u202e``..., never sent to a terminal.
"""

from __future__ import annotations

import re

MASK = "***"
# a URL: scheme://rest, the rest ending at white space, a quote or an angle bracket
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s\"'<>`]*)")
# user:password@ at the start of a URL's rest; the password may hold '/' (SQLAlchemy reads
# it so) and '@': it is taken up to the last '@' before the query (masking too much is safe)
_USERINFO = re.compile(r"^([^:/@?#\s]*):([^?#\s]*)@")
# a parameter of the query or fragment
_PARAM = re.compile(r"([?&;#])([^=&;#?\s]*)=([^&;#\s]*)")
_SECRET_NAME = re.compile(r"(?i)pass|pwd|token|secret|key|auth|credential|signature")
# outside a URL (a server echoing a request's path, a libpq "password=..." string): a
# parameter whose whole name says it holds a secret, after a separator
_LOOSE_PARAM = re.compile(
    r"(?i)(^|[\s?&;,(\[{\"'])((?:[a-z0-9]+[_.-])*(?:(?:ssl)?password|passwd|pwd|pass|token|"
    r"secret|api-?key|apikey|key|auth|credentials?|signature))=([^\s&;#\"'<>,)\]}]+)")
# what a terminal must not be sent: C0 but tab and newline, DEL, C1; bidirectional
# marks, embeddings, overrides and isolates; the Unicode line and paragraph separators
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROL}]")
_UNSAFE_LINES = re.compile(f"[{_CONTROL}\n\t]")


def _mask_url(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    rest = _USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", rest, count=1)
    return scheme + _PARAM.sub(
        lambda m: f"{m.group(1)}{m.group(2)}={MASK}"
        if _SECRET_NAME.search(m.group(2)) and m.group(3) else m.group(0), rest)


def mask_secrets(text: str) -> str:
    """``text`` with the secrets of every URL in it replaced by ``***`` (module doc), and
    of every ``password=``, ``token=``, ``api_key=``... parameter outside one."""
    if "://" in text:
        text = _URL.sub(_mask_url, text)
    if "=" in text:
        text = _LOOSE_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}={MASK}", text)
    return text


def mask_values(value: object) -> object:
    """:func:`mask_secrets` applied to every string in a JSON-like value (dicts, lists)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {k: mask_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_values(v) for v in value]
    return value


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries ``user[:password]@`` before its host."""
    return strip_userinfo(url) != url


def strip_userinfo(url: str) -> str:
    """``url`` without ``user[:password]@`` (the authority's part up to its last '@')."""
    m = re.match(r"(?i)([a-z][a-z0-9+.\-]*://)([^/?#]*)", url)
    if not m or "@" not in m.group(2):
        return url
    return m.group(1) + m.group(2).rsplit("@", 1)[1] + url[m.end():]


def printable(text: str, lines: bool = False) -> str:
    """``text`` with every character a terminal would obey shown escaped (``\\x1b``); with
    ``lines``, newlines and tabs stay (multi-line text such as a program's source)."""
    pattern = _UNSAFE if lines else _UNSAFE_LINES
    return pattern.sub(_escape, str(text))


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
