"""Credentials out of text that xover shows or stores: command lines, lease holders, reports.

A store's URL may carry a password (`postgresql://user:pw@host/db`, `...?password=pw`). Wherever a URL
can end up where others read it (a lease file every user can read, a report, the store's own record
of the command), the password is written as `***`.
"""

from __future__ import annotations

import re

MASK = "***"
# scheme://user:password@ -> scheme://user:***@ (up to the word's last '@': an unescaped '@' in a password
# hides more of the URL, never less of the password)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):[^\s'\"]*@")
# ?password=... / &password=... (libpq's and SQLAlchemy's query options)
_QUERY = re.compile(r"(?P<head>[?&](?:password|passwd|pwd|sslpassword)=)[^&\s]*", re.IGNORECASE)


def mask_credentials(text: str) -> str:
    """`text` with every URL's password shown as ***."""
    return _QUERY.sub(rf"\g<head>{MASK}", _USERINFO.sub(rf"\g<head>:{MASK}@", text))
