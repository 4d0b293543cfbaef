"""Principals from TLS client certificates: Kafka's ``ssl.principal.mapping.rules``.

A client that presents a certificate the server verified (``server.ssl.client.auth``
= ``required`` or ``requested``) and sends no API key is the principal named by
the certificate's subject. As in Kafka, the subject is the distinguished name in
RFC 2253 form (``CN=alice,OU=eng,O=acme,C=US``: most specific first), and the
rules map it to a name, the first rule that matches deciding:

* ``RULE:pattern/replacement/[L|U]`` — if the Java-style regular expression
  ``pattern`` matches the whole DN, the name is ``replacement`` with ``$1``,
  ``$2`` … filled from its groups, lower- (``L``) or upper-cased (``U``) if asked;
* ``DEFAULT`` — the DN itself.

No rule matching is an error (the client is refused), as in Kafka. The principal
is ``User:<name>``: ``RULE:^CN=(.*?),OU=.*$/$1/`` turns ``CN=alice,OU=eng`` into
``User:alice``; with the default rules it is ``User:CN=alice,OU=eng``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from logstore.errors import InvalidConfigError, SaslAuthenticationFailedError

__all__ = ["DEFAULT_RULES", "PrincipalMapper", "rfc2253"]

DEFAULT_RULES = "DEFAULT"

# Kafka's own rule grammar (SslPrincipalMapper.RULE_SPLITTER / RULE_PARSER).
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:[,\n]\s*|$)")
_GROUP_REF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None = DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        name = m.expand(self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed once (per node); :meth:`principal` maps a DN.

    Raises:
        InvalidConfigError: the rules do not parse, or a pattern is not a valid regular expression.
    """

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        self.rules = tuple(_parse(rules))

    def principal(self, dn: str) -> str:
        """``User:<name>`` for the certificate subject ``dn`` (RFC 2253).

        Raises:
            SaslAuthenticationFailedError: no rule matches ``dn``.
        """
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return f"User:{name}"
        raise SaslAuthenticationFailedError(f"no ssl.principal.mapping.rules rule matches the certificate '{dn}'")


def _parse(text: str) -> Iterable[_Rule]:
    text = text.strip()
    if not text:
        raise InvalidConfigError("ssl.principal.mapping.rules is empty; use DEFAULT for the certificate's DN")
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ","):  # empty entries, as Kafka allows
            pos += 1
        if pos == len(text):
            return
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            raise InvalidConfigError(
                f"ssl.principal.mapping.rules: cannot parse '{text[pos:]}' "
                "(expected DEFAULT or RULE:pattern/replacement/[L|U], separated by commas)"
            )
        pos = m.end()
        if m.group(1) == "DEFAULT":
            yield _Rule(None)
            continue
        try:
            pattern = re.compile(m.group(2))
        except re.error as e:
            raise InvalidConfigError(f"ssl.principal.mapping.rules: bad pattern '{m.group(2)}': {e}") from None
        # Java's $1 → Python's \g<1>; backslash escapes in the replacement stay literal characters.
        replacement = _GROUP_REF.sub(r"\\g<\1>", m.group(3).replace("\\/", "/"))
        yield _Rule(pattern, replacement, m.group(4))


def rfc2253(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """The RFC 2253 DN of a certificate subject as :meth:`ssl.SSLSocket.getpeercert` gives it.

    ``getpeercert`` lists the relative distinguished names in the certificate's
    order (country first, usually); RFC 2253 — and Kafka's principal — writes
    them most specific first, with ``,``, ``+``, ``"``, ``\\``, ``<``, ``>``,
    ``;`` and leading ``#``/spaces escaped.
    """
    short = {
        "commonName": "CN",
        "organizationalUnitName": "OU",
        "organizationName": "O",
        "countryName": "C",
        "localityName": "L",
        "stateOrProvinceName": "ST",
        "streetAddress": "STREET",
        "domainComponent": "DC",
        "userId": "UID",
    }
    rdns = ["+".join(f"{short.get(k, k)}={_escape(v)}" for k, v in rdn) for rdn in subject]
    return ",".join(reversed(rdns))


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
