"""Principals from client certificates: Kafka's ssl.principal.mapping.rules, and RFC 2253 subjects."""

from __future__ import annotations

import pytest

from logstore.errors import InvalidConfigError, SaslAuthenticationFailedError
from logstore.security.principal import PrincipalMapper, rfc2253

KAFKA_RULES = ", ".join(
    [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
)


@pytest.mark.parametrize(
    ("dn", "principal"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "User:duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "User:duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "User:DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "User:DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "User:OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_rules_map_as_kafkas_do(dn: str, principal: str) -> None:
    assert PrincipalMapper(KAFKA_RULES).principal(dn) == principal


def test_default_is_the_whole_dn() -> None:
    assert PrincipalMapper().principal("CN=alice,OU=eng") == "User:CN=alice,OU=eng"


def test_an_escaped_comma_stays_inside_a_name() -> None:
    mapper = PrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.principal(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"User:Tkac\, Adam"


def test_empty_entries_between_rules_are_skipped() -> None:
    assert PrincipalMapper(",,RULE:^CN=(.*)$/$1/,,,DEFAULT,,").principal("CN=bob") == "User:bob"


def test_no_matching_rule_refuses_the_client() -> None:
    with pytest.raises(SaslAuthenticationFailedError, match="CN=bob,O=x"):
        PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").principal("CN=bob,O=x")


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "RULE:^CN=(.*?/$1/",
        "",
    ],
)
def test_bad_rules_are_a_config_error(rules: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"ssl\.principal\.mapping\.rules"):
        PrincipalMapper(rules)


def test_subjects_are_written_most_specific_first_with_escapes() -> None:
    subject = (
        (("countryName", "US"),),
        (("organizationName", "Acme, Inc."),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"), ("userId", "a1")),
    )
    assert rfc2253(subject) == r"CN=alice+UID=a1,OU=eng,O=Acme\, Inc.,C=US"
