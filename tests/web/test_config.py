"""--web-config-file: exporter-toolkit's keys and meaning, one-line errors naming file and key,
the basic-auth checker (bcrypt off the loop, remembered successes), and a property test: any
text gives a WebConfig or a WebConfigError, never another exception."""

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_enricher.web.config import (
    CIPHERS,
    CURVES,
    HEADERS,
    WebConfig,
    WebConfigError,
    load_web_config,
    parse_web_config,
)
from gpu_enricher.web.security import BasicAuth, basic_credentials

PATH = "/etc/web/web.yml"
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


def parse(text: str) -> WebConfig:
    return parse_web_config(text, PATH)


def error(text: str) -> str:
    with pytest.raises(WebConfigError) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{PATH}"), message
    return message


def test_an_empty_file_is_plain_http_without_auth() -> None:
    for text in ("", "---\n", "tls_server_config:\n", "tls_server_config: {}\n"
                 "http_server_config: {}\nbasic_auth_users: {}\n"):
        config = parse(text)
        assert (config.tls, config.users, config.headers, config.notes) == (None, (), (), ())


def test_exporter_toolkits_example_file() -> None:
    config = parse(f"""
tls_server_config:
  cert_file: server.crt
  key_file: /keys/server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  min_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
  curve_preferences: [X25519]
http_server_config:
  headers:
    X-Frame-Options: deny
    X-XSS-Protection: 0
    Content-Security-Policy: ""
basic_auth_users:
  alice: {HASH}
  1234: {HASH}
""")
    tls = config.tls
    assert tls is not None
    # Relative to the web config's directory, as exporter-toolkit resolves them.
    assert tls.cert_file == Path("/etc/web/server.crt")
    assert tls.key_file == Path("/keys/server.key")
    assert tls.client_ca_file == Path("/etc/web/ca.crt")
    assert (tls.client_auth_type, tls.min_version, tls.max_version) == (
        "RequireAndVerifyClientCert", "TLS13", "TLS13")
    assert tls.ciphers == ("ECDHE-RSA-AES128-GCM-SHA256",), "TLS 1.3 suites: not configurable"
    assert tls.prefer_server_cipher_suites is False
    assert tls.curves == ("X25519",)
    # A blank header is unset; a number is its text, as Go's YAML reads it into a string.
    assert config.headers == (("X-Frame-Options", "deny"), ("X-XSS-Protection", "0"))
    assert config.users == (("alice", HASH), ("1234", HASH))
    assert config.notes == ()


@pytest.mark.parametrize(("text", "message"), [
    ("tls_server_config:\n  cert_fil: x\n",
     f"{PATH}: tls_server_config.cert_fil: unknown key (did you mean cert_file?)"),
    ("tls_server_config:\n  certificate_authority: x\n",
     f"{PATH}: tls_server_config.certificate_authority: unknown key"),
    ("tls_config:\n  cert_file: x\n",
     f"{PATH}: tls_config: unknown key (did you mean tls_server_config?)"),
    ("http_server_config:\n  http3: true\n",
     f"{PATH}: http_server_config.http3: unknown key (did you mean http2?)"),
    ("rate_limit:\n  interval: 1s\n",
     f"{PATH}: rate_limit: not supported: exporter-toolkit's rate limiter is not implemented by "
     "gpu-enricher"),
    ("tls_server_config:\n  client_allowed_sans: [a]\n",
     f"{PATH}: tls_server_config.client_allowed_sans: not supported: matching client "
     "certificate SANs is not implemented by gpu-enricher; issue client certificates from a CA "
     "of their own instead"),
    ("tls_server_config:\n  key_file: k\n",
     f"{PATH}: tls_server_config.cert_file: missing: TLS needs a certificate (cert_file or "
     "cert)"),
    ("tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
     f"{PATH}: tls_server_config.cert_file: missing: TLS needs a certificate (cert_file or "
     "cert)"),
    ("tls_server_config:\n  cert_file: c\n",
     f"{PATH}: tls_server_config.key_file: missing: TLS needs a private key (key_file or key)"),
    ("tls_server_config:\n  cert_file: c\n  cert: PEM\n  key_file: k\n",
     f"{PATH}: tls_server_config.cert: set either cert_file or cert, not both"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: Always\n",
     f"{PATH}: tls_server_config.client_auth_type: 'Always' is not one of NoClientCert, "
     "RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, "
     "RequireAndVerifyClientCert, RequireClientCert"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\n",
     f"{PATH}: tls_server_config.client_ca_file: a client CA without client_auth_type (set "
     "RequireAndVerifyClientCert to verify client certificates)"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS14\n",
     f"{PATH}: tls_server_config.min_version: 'TLS14' is not one of TLS10, TLS11, TLS12, TLS13"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  max_version: TLS11\n",
     f"{PATH}: tls_server_config.max_version: TLS11: TLS 1.0 and 1.1 are refused by OpenSSL at "
     "Python's security level; use TLS12 or TLS13"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS13\n"
     "  max_version: TLS12\n",
     f"{PATH}: tls_server_config.min_version: TLS13 is above max_version TLS12"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  cipher_suites: "
     "[TLS_ECDHE_RSA_WITH_RC4_128_SHA]\n",
     f"{PATH}: tls_server_config.cipher_suites[0]: TLS_ECDHE_RSA_WITH_RC4_128_SHA is insecure "
     "(Go's InsecureCipherSuites); exporter-toolkit refuses it too"),
    ("tls_server_config:\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA265]\n",
     f"{PATH}: tls_server_config.cipher_suites[0]: unknown cipher suite "
     "'TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA265' (did you mean "
     "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256?)"),
    ("tls_server_config:\n  curve_preferences: [P256]\n",
     f"{PATH}: tls_server_config.curve_preferences[0]: unknown curve 'P256': one of CurveP256, "
     "CurveP384, CurveP521, X25519"),
    ("tls_server_config:\n  prefer_server_cipher_suites: maybe\n",
     f"{PATH}: tls_server_config.prefer_server_cipher_suites: expected a boolean (true or "
     "false), got a string"),
    ("tls_server_config:\n  cipher_suites: TLS_AES_128_GCM_SHA256\n",
     f"{PATH}: tls_server_config.cipher_suites: expected a list, got a string"),
    ("tls_server_config:\n  cert_file: [a, b]\n",
     f"{PATH}: tls_server_config.cert_file: expected a string, got a list"),
    ("tls_server_config: yes\n",
     f"{PATH}: tls_server_config: expected a mapping, got a boolean"),
    ("- a\n", f"{PATH}: document: expected a mapping, got a list"),
    ("http_server_config:\n  headers:\n    Content-Type: foo\n",
     f"{PATH}: http_server_config.headers.Content-Type: this header cannot be configured "
     "(exporter-toolkit allows Strict-Transport-Security, X-Content-Type-Options, "
     "X-Frame-Options, X-XSS-Protection, Content-Security-Policy)"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     f"{PATH}: http_server_config.headers.X-Frame-Options: 'allow' is not one of deny, "
     "sameorigin"),
    ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
     f"{PATH}: http_server_config.headers.X-Content-Type-Options: 'sniff' is not one of "
     "nosniff"),
    ('http_server_config:\n  headers:\n    Content-Security-Policy: "a\\r\\nSet-Cookie: x"\n',
     f"{PATH}: http_server_config.headers.Content-Security-Policy: a control character in the "
     "value"),
    ("basic_auth_users:\n  alice: secret\n",
     f"{PATH}: basic_auth_users.alice: not a bcrypt hash ($2y$10$… from `htpasswd -nBC 10 \"\"`)"),
    (f"basic_auth_users:\n  'a:b': {HASH}\n",
     f"{PATH}: basic_auth_users.a:b: a user name cannot contain ':' (basic auth splits on it)"),
    ("basic_auth_users:\n  alice: x\n  alice: y\n",
     f"{PATH}: basic_auth_users.alice: duplicate key"),
    ("basic_auth_users: &a\n  x: *a\n", f"{PATH}:1:19: invalid YAML: anchors and aliases are "
     "not allowed"),
    ("tls_server_config:\n  cert_file: [\n", f"{PATH}:3:1: invalid YAML: expected the node "
     "content, but found '<stream end>'"),
    ("tls_server_config: !!binary aGk=\n", f"{PATH}: tls_server_config: YAML tag 'binary' is "
     "not allowed"),
    ("basic_auth_users:\n  ~: x\n", f"{PATH}: basic_auth_users: a key must be plain text"),
    ("a: " + "[" * 20 + "]" * 20 + "\n", f"{PATH}:1:11: invalid YAML: nested more than 8 levels"),
])
def test_a_bad_file_is_one_line_naming_file_and_key(text: str, message: str) -> None:
    assert error(text) == message


def test_what_python_cannot_express_is_an_error_or_a_note() -> None:
    for auth in ("RequireAnyClientCert", "RequireClientCert"):
        message = error(f"tls_server_config:\n  cert_file: c\n  key_file: k\n"
                        f"  client_auth_type: {auth}\n")
        assert message == (f"{PATH}: tls_server_config.client_auth_type: {auth} (require a "
                           "certificate but do not verify it) cannot be expressed with Python's "
                           "ssl: use RequireAndVerifyClientCert with client_ca_file")
    config = parse("tls_server_config:\n  cert_file: c\n  key_file: k\n"
                   "  client_auth_type: RequestClientCert\n  min_version: TLS10\n"
                   "  curve_preferences: [X25519, CurveP256]\nhttp_server_config:\n  http2: true\n")
    assert config.tls is not None
    assert (config.tls.min_version, config.tls.curves) == ("TLS12", ())
    assert {n.split(": ")[1] for n in config.notes} == {
        "tls_server_config.client_auth_type", "tls_server_config.min_version",
        "tls_server_config.curve_preferences", "http_server_config.http2"}
    assert all(n.startswith(f"{PATH}: ") and "\n" not in n for n in config.notes)
    # http2: false is what gpu-enricher does anyway: nothing to say.
    assert parse("http_server_config:\n  http2: false\n").notes == ()


def test_every_go_name_maps_to_an_openssl_name() -> None:
    assert len(set(CIPHERS.values())) == 14  # two legacy Go names share OpenSSL's
    assert set(CURVES) == {"CurveP256", "CurveP384", "CurveP521", "X25519"}
    assert len(HEADERS) == 5


def test_the_file_itself(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    with pytest.raises(WebConfigError, match=f"^{web}: cannot read web config: No such file"):
        load_web_config(web)
    with pytest.raises(WebConfigError, match=f"^{tmp_path}: not a regular file$"):
        load_web_config(tmp_path)
    web.write_bytes(b"basic_auth_users:\n  \xff: x\n")
    with pytest.raises(WebConfigError, match=rf"^{web}:2: not UTF-8 text \(byte 0xff\)$"):
        load_web_config(web)
    web.write_bytes(b"#" * (1 << 20) + b"\n")
    with pytest.raises(WebConfigError, match=f"^{web}: larger than 1 MiB$"):
        load_web_config(web)
    web.write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
    tls = load_web_config(web).tls
    assert tls is not None and tls.cert_file == tmp_path / "c.pem"


# --- basic auth -------------------------------------------------------------------------------


def basic(user: str | bytes, password: str | bytes) -> str:
    raw = (user.encode() if isinstance(user, str) else user) + b":" + (
        password.encode() if isinstance(password, str) else password)
    return "Basic " + base64.b64encode(raw).decode()


def test_basic_credentials_as_go_reads_them() -> None:
    assert basic_credentials(basic("alice", "a:b")) == (b"alice", b"a:b")
    assert basic_credentials("basic " + basic("alice", "")[6:]) == (b"alice", b"")
    for header in (None, "", "Bearer x", "Basic", "Basic !!!", "Basic " + "YWxpY2U=",
                   "Basic YWxp Y2U6eA==", "Basic é"):
        assert basic_credentials(header) is None, header


async def test_basic_auth_checks_once_and_remembers_successes_only() -> None:
    auth = BasicAuth([("alice", HASH), ("bob", HASH)])
    try:
        assert await auth.check(None) == "missing"
        assert await auth.check(basic("alice", "wrong")) == "wrong"
        assert await auth.check(basic("alice", "wrong")) == "wrong"
        assert auth.bcrypt_checks == 2, "a failure is never remembered"
        assert await auth.check(basic("mallory", "s3cret")) == "wrong"
        assert auth.bcrypt_checks == 3, "an unknown user costs a bcrypt too"
        assert await auth.check(basic("alice", "s3cret")) is None
        for _ in range(100):
            assert await auth.check(basic("alice", "s3cret")) is None
        assert auth.bcrypt_checks == 4, "remembered"
        # The same right credentials at once share one check.
        results = await asyncio.gather(*(auth.check(basic("bob", "s3cret")) for _ in range(20)))
        assert results == [None] * 20 and auth.bcrypt_checks == 5
        # bcrypt reads 72 bytes: so does the check (Python's bcrypt would raise).
        assert await auth.check(basic("alice", "s3cret" + "x" * 100)) == "wrong"
        assert await auth.check(basic(b"alice", b"s3\x00cret")) == "wrong"
    finally:
        auth.close()


async def test_bcrypt_runs_off_the_event_loop_and_a_flood_is_bounded() -> None:
    slow = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(10)).decode()
    auth = BasicAuth([("alice", slow)])
    try:
        assert await auth.check(basic("alice", "s3cret")) is None
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        started = time.monotonic()
        flood = [asyncio.create_task(auth.check(basic("alice", f"guess{n}")))
                 for n in range(BasicAuth.MAX_WAITING + 10)]
        await asyncio.sleep(0)
        # Remembered credentials get in at once, whatever is queued.
        assert await auth.check(basic("alice", "s3cret")) is None
        await asyncio.sleep(0.1)
        assert ticks >= 5, "the loop keeps running while bcrypt works"
        for pending in flood:
            pending.cancel()
        results = await asyncio.gather(*flood, return_exceptions=True)
        assert [r for r in results if r == "busy"] == ["busy"] * 10
        task.cancel()
        assert time.monotonic() - started < 5
    finally:
        auth.close()


# --- property ---------------------------------------------------------------------------------

KEYS = ["tls_server_config", "http_server_config", "basic_auth_users", "cert_file", "key_file",
        "cert", "key", "client_ca_file", "client_ca", "client_auth_type", "min_version",
        "max_version", "cipher_suites", "prefer_server_cipher_suites", "curve_preferences",
        "http2", "headers", "X-Frame-Options", "Strict-Transport-Security", "rate_limit",
        "client_allowed_sans", "alice"]
VALUES = ["RequireAndVerifyClientCert", "RequestClientCert", "RequireAnyClientCert", "TLS10",
          "TLS13", "TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
          "TLS_RSA_WITH_RC4_128_SHA", "X25519", "CurveP384", "deny", "nosniff", HASH, "c.pem"]
TOKENS = [*(f"{k}: " for k in KEYS), *VALUES, "\n", "\n  ", "\n    ", "- ", "[", "]", "{", "}",
          ", ", ": ", "&a ", "*a", "!!binary ", "!!python/object:os.system ", "!x ", "? ",
          "---\n", "'", '"', "#", "|\n", "0", "-1", "1.5", ".inf", "true", "no", "~", "null",
          "1:30", "2001-02-30", "\t", "\x00", "\x85", "\u2028", "\ufeff", "\r", "é", "<<: ",
          "!!int x", "9" * 5000]
yaml_like = st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=40).map("".join)

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(VALUES) | \
    st.text(max_size=10)
documents: st.SearchStrategy[Any] = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=5),
    max_leaves=20)


def _accepts_or_one_line(text: str) -> None:
    try:
        config = parse_web_config(text, PATH)
    except WebConfigError as exc:
        assert str(exc).startswith(PATH) and "\n" not in str(exc), exc
        return
    assert isinstance(config, WebConfig)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_like)
def test_any_text_gives_a_config_or_one_error_line(text: str) -> None:
    _accepts_or_one_line(text)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS[:3]), documents, max_size=3) | documents)
def test_any_yaml_structure_gives_a_config_or_one_error_line(document: Any) -> None:
    _accepts_or_one_line(yaml.safe_dump(document, allow_unicode=True))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Module-scoped: hypothesis runs many examples per call of a function-scoped fixture.
    return tmp_path_factory.mktemp("web-config-fuzz")


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | yaml_like.map(lambda text: text.encode("utf-8", "replace")))
def test_any_file_gives_a_config_or_one_error_line(fuzz_dir: Path, data: bytes) -> None:
    path = fuzz_dir / "web.yml"
    path.write_bytes(data)
    try:
        config = load_web_config(path)
    except WebConfigError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc), exc
        return
    assert config.path == str(path)
