"""Laws of ensemble.decide.carrier_nodes: function names, carrier node names, the config line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ensemble import Badarg
from ensemble.decide import allow, handshake
from ensemble.decide.carrier_nodes import (
    MAX_CONFIG,
    BadCarrierConfig,
    CarrierConfig,
    NotImportable,
    carrier_name,
    encode_config,
    function_name,
    parse_config,
)

identifier = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
dotted = st.lists(identifier, min_size=1, max_size=3).map(".".join)
node_name = st.builds(lambda a, h: f"{a}@{h}", identifier, st.sampled_from(["127.0.0.1", "host", "a.b"]))
text = st.text(max_size=30)

configs = st.builds(
    CarrierConfig,
    name=node_name,
    parent=node_name,
    cookie=text,
    listen_host=st.text(min_size=1, max_size=20),
    epmd_port=st.one_of(st.none(), st.integers(1, 65535)),
    sys_path=st.lists(text, max_size=5).map(tuple),
    main_path=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    main_module=st.none(),
    tls=st.one_of(st.none(), st.tuples(text, text, text, st.booleans())),
) | st.builds(
    CarrierConfig,
    name=node_name,
    parent=node_name,
    cookie=text,
    listen_host=st.just("127.0.0.1"),
    epmd_port=st.none(),
    sys_path=st.just(()),
    main_path=st.none(),
    main_module=dotted,
)


@given(configs)
def test_a_config_comes_back_from_its_line(config):
    line = encode_config(config)
    assert line.endswith(b"\n") and line.count(b"\n") == 1, "one line: the child reads one"
    assert parse_config(line) == config


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_bad_carrier_config(data):
    try:
        assert isinstance(parse_config(data), CarrierConfig)
    except BadCarrierConfig:
        pass


@given(configs, st.sampled_from(["name", "parent", "cookie", "listen_host", "epmd_port", "sys_path",
                                 "main_path", "main_module", "tls"]),
       st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_a_changed_field_is_parsed_checked_or_refused(config, field, value):
    fields = json.loads(encode_config(config))
    fields[field] = value
    try:
        parsed = parse_config(json.dumps(fields).encode())
    except BadCarrierConfig:
        return
    assert handshake.valid_name(parsed.name) and handshake.valid_name(parsed.parent)
    assert parsed.epmd_port is None or 0 < parsed.epmd_port < 65536
    assert all(type(p) is str for p in parsed.sys_path)
    assert parsed.main_path is None or parsed.main_module is None


def test_refusals():
    good = json.loads(encode_config(CarrierConfig("c@h", "p@h", "k", "127.0.0.1", None, ())))
    for bad in (b"", b"[]", b"{}", b"\xff", b"1" * (MAX_CONFIG + 1), b"[" * 100_000,
                json.dumps({**good, "extra": 1}).encode(),
                json.dumps({**good, "main_path": "x", "main_module": "y"}).encode(),
                json.dumps({**good, "epmd_port": 0}).encode(),
                json.dumps({**good, "name": "no-at-sign"}).encode()):
        with pytest.raises(BadCarrierConfig):
            parse_config(bad)
    with pytest.raises(BadCarrierConfig):
        parse_config("a str, not bytes")


@given(st.text(min_size=1, max_size=100), st.integers(0, 10**6), st.integers(0, 10**6),
       st.integers(1, 2**22), st.sampled_from(["127.0.0.1", "host"]))
def test_carrier_names_are_valid_and_distinct_by_index_and_generation(pool, index, generation, os_pid, host):
    name = carrier_name(pool, index, generation, os_pid, host)
    assert handshake.valid_name(name) and name.endswith("@" + host)
    assert carrier_name(pool, index + 1, generation, os_pid, host) != name
    assert carrier_name(pool, index, generation + 1, os_pid, host) != name
    assert carrier_name(pool, index, generation, os_pid + 1, host) != name


def test_a_carrier_name_for_a_host_no_name_can_have_is_badarg():
    with pytest.raises(Badarg):
        carrier_name("cpu", 0, 1, 1, "bad host")


@given(st.one_of(st.none(), st.integers(), text), st.one_of(st.none(), st.integers(), text))
def test_function_names_are_module_colon_qualname_or_not_importable(module, qualname):
    try:
        name = function_name(module, qualname)
    except NotImportable as e:
        assert isinstance(e, Badarg)
        return
    assert name == f"{module}:{qualname}"
    assert allow.parse(name) == (module, qualname)


@pytest.mark.parametrize("qualname", ["<lambda>", "f.<locals>.g", "__call__", ""])
def test_lambdas_nested_and_dunder_functions_are_not_importable(qualname):
    with pytest.raises(NotImportable):
        function_name("mod", qualname)
