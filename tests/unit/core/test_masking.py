"""Secrets a server echoes back (an error page quoting the request's headers) reach neither
errors nor log lines; URLs with credentials in odd places are never quoted whole."""

from __future__ import annotations

import base64
import logging

import httpx
import pytest

from dxt_core.backends.prometheus.transport import PromHttp
from dxt_core.errors import ConfigError, DxtError, QueryRejected, SourceError, SourceUnavailable
from dxt_core.http import HttpClient, RetryPolicy
from dxt_core.masking import hide, scrub
from dxt_core.publish.dataset import PublishOptions
from dxt_core.store.sigv4 import check_endpoint, environment_credentials
from dxt_core.urls import normalise_base_url, redact_url

PASSWORD = "S3cr3t/P@ss#1"
TOKEN = "tok_ABCDEF0123456789SECRET"


def _echo(status: int, *, json: bool = False):
    """A server (or proxy) whose error page quotes the request's headers."""

    def handler(req: httpx.Request) -> httpx.Response:
        headers = "\n".join(f"{k}: {v}" for k, v in req.headers.items())
        if json:
            return httpx.Response(status, json={"error": f"bad request; headers: {headers}"})
        return httpx.Response(status, text=f"<pre>{headers}</pre>")

    return handler


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("status", [400, 401, 500, 503])
@pytest.mark.parametrize("json", [False, True])
def test_an_echoed_authorization_header_reaches_no_error_and_no_log(
    status: int, json: bool, caplog: pytest.LogCaptureFixture
) -> None:
    c = HttpClient(
        "http://alice:S3cr3t%2FP%40ss%231@kairos.example:8083",
        retry=RetryPolicy(attempts=2, backoff_s=0, jitter=0),
        sleep=lambda s: None,
        transport=httpx.MockTransport(_echo(status, json=json)),
    )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SourceError) as err:
        c.get_json("api/v1/version")
    seen = str(err.value) + "\n".join(r.getMessage() for r in caplog.records)
    for secret in (PASSWORD, "S3cr3t%2FP%40ss%231", _basic("alice", PASSWORD)):
        assert secret not in seen
    assert "***" in str(err.value)  # the echo is quoted, masked


def test_an_echoed_bearer_token_reaches_no_error() -> None:
    c = PromHttp(
        "http://vm.example:8428",
        retry=RetryPolicy(attempts=1),
        transport=httpx.MockTransport(_echo(401)),
    )
    c.bearer = TOKEN
    with pytest.raises(QueryRejected) as err:
        c.get_json("api/v1/status/buildinfo")
    assert TOKEN not in str(err.value) and "authentication failed" in str(err.value)


def test_a_200_answer_that_is_not_json_is_quoted_masked() -> None:
    c = HttpClient(
        "http://alice:S3cr3t%2FP%40ss%231@kairos.example:8083",
        retry=RetryPolicy(attempts=1),
        transport=httpx.MockTransport(_echo(200)),
    )
    with pytest.raises(SourceError) as err:
        c.get_json("api/v1/version")
    assert "not valid JSON" in str(err.value)
    assert _basic("alice", PASSWORD) not in str(err.value)


def test_scrub_masks_secrets_and_credentials_and_leaves_words() -> None:
    hide("Zq9-unit-secret", user="bob")
    text = (
        "pass Zq9-unit-secret, encoded Zq9-unit-secret, pair "
        f"{_basic('bob', 'Zq9-unit-secret')}; Authorization: ApiKey abc; "
        '"authorization": "Token xyz"; Bearer eyJhbGciOi.J9x; Basic authentication failed'
    )
    out = scrub(text)
    assert "Zq9" not in out and _basic("bob", "Zq9-unit-secret") not in out
    assert "ApiKey abc" not in out and "Token xyz" not in out and "eyJhbGciOi" not in out
    assert out.endswith("Basic authentication failed")
    assert "Zq9-unit-secret" not in str(DxtError("x Zq9-unit-secret y"))
    assert str(ConfigError("plain words stay")) == "plain words stay"


def test_a_url_without_a_scheme_is_never_quoted_with_its_password() -> None:
    url = f"alice:{PASSWORD}@127.0.0.1:1"
    assert "S3cr3t" not in redact_url(url) and "alice" not in redact_url(url)
    with pytest.raises(ConfigError) as err:
        normalise_base_url(url, "Kwollect API URL")
    assert "S3cr3t" not in str(err.value) and "expected http(s)://host" in str(err.value)


def test_an_unclosed_ipv6_bracket_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        normalise_base_url("http://u:pw1234@[::1", "Examon URL")
    assert "IPv6" in str(err.value) and "pw1234" not in str(err.value)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://AKIA:awsSECRETkey/abc+XYZ0123456789@127.0.0.1:9000",
        "http://AKIA:awsSECRETkey#abc@127.0.0.1:9000",
        "AKIA:awsSECRETkey/abc@127.0.0.1:9000",
    ],
)
def test_an_s3_endpoint_with_a_secret_holding_a_slash_is_refused_unquoted(endpoint: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_endpoint(endpoint, "AWS_ENDPOINT_URL", "give the credentials elsewhere")
    assert "awsSECRETkey" not in str(err.value) and "user name or password" in str(err.value)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    with pytest.raises(ConfigError) as err:
        environment_credentials(env)
    assert "awsSECRETkey" not in str(err.value)


@pytest.mark.parametrize("field", ["url", "source"])
def test_publish_refuses_an_address_with_credentials(field: str, tmp_path) -> None:
    with pytest.raises(ConfigError) as err:
        PublishOptions(
            archive=tmp_path,
            out=tmp_path / "out",
            from_month="2024-03",
            to_month="2024-03",
            **{field: f"see https://alice:{PASSWORD}@data.example.org/ds"},
        )
    assert "S3cr3t" not in str(err.value) and f"--{field}" in str(err.value)
    with pytest.raises(ConfigError) as err:  # a quote in the password ended the URL found
        PublishOptions(
            archive=tmp_path,
            out=tmp_path / "out",
            from_month="2024-03",
            to_month="2024-03",
            **{field: f"https://alice:it's-{PASSWORD}@data.example.org/x"},
        )
    assert "S3cr3t" not in str(err.value)
    for fine in (
        "the monitoring of cluster X (contact: ops@example.org)",
        "cluster X, https://fosstodon.org/@cineca",
        "https://example.org/ds?contact=ops@cineca.it",
        "https://example.org:8443/x@y",
    ):
        PublishOptions(
            archive=tmp_path,
            out=tmp_path / "out",
            from_month="2024-03",
            to_month="2024-03",
            source=fine,
            url=fine,
        )


def test_unavailable_after_retries_names_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    c = HttpClient(
        "http://alice:S3cr3t%2FP%40ss%231@kairos.example:8083",
        retry=RetryPolicy(attempts=3, backoff_s=0, jitter=0),
        sleep=lambda s: None,
        transport=httpx.MockTransport(_echo(502)),
    )
    caplog.set_level(logging.WARNING)
    with pytest.raises(SourceUnavailable) as err:
        c.get_json("x")
    assert caplog.records and _basic("alice", PASSWORD) not in caplog.text + str(err.value)


def test_a_bearer_token_with_a_newline_is_refused_unquoted() -> None:
    from dxt_core.backends.prometheus.connection import PrometheusConnection

    with pytest.raises(ConfigError) as err:
        PrometheusConnection(
            "http://vm.example:8428", password="glsa_8f3kd93kdl2Q\n", auth="bearer"
        )
    assert "glsa" not in str(err.value) and "newline" in str(err.value)


def test_log_lines_of_dxt_core_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    from dxt_core import masking

    hide("Kx7-log-secret", user="carol")
    log = masking.logger("dxt_core.test_masking")
    caplog.set_level(logging.INFO)
    log.warning("GET / answered %r", b'{"authorization": "Basic abc123=="} Kx7-log-secret')
    assert "Kx7-log-secret" not in caplog.text and "abc123" not in caplog.text
    assert "GET / answered" in caplog.text


def test_short_secrets_leave_words_and_numbers_alone() -> None:
    hide("test", user="dave")
    hide("2024")
    text = "no data for 2024-05-01; give a test value at http://x"
    assert scrub(text) == text
    assert _basic("dave", "test") not in scrub(f"Basic {_basic('dave', 'test')}")


def test_main_called_as_a_function_leaves_the_signal_handlers_as_it_found_them(tmp_path) -> None:
    import signal
    import threading

    from dxt_core.cli import main

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    (tmp_path / ".dxt-days-examon.json").write_text('{"time_zone": "UTC"}')  # an archive
    assert main(["index", "rebuild", "--archive", str(tmp_path)]) == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before
    got: list[int] = []
    t = threading.Thread(
        target=lambda: got.append(main(["index", "rebuild", "--archive", str(tmp_path)]))
    )
    t.start()
    t.join()
    assert got == [0]  # off the main thread: no handler is installed (it raised ValueError)


def _pad_echo(pad: int, secret: str, status: int = 401):
    """A server whose error answer quotes ``secret`` after ``pad`` characters of text."""

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text="E" * pad + " token=" + secret + " end")

    return handler


@pytest.mark.parametrize("pad", [180, 280, 290, 470, 478, 485, 495])
def test_a_secret_where_a_quote_is_cut_shows_no_part_of_itself(pad: int) -> None:
    """The answer's start was cut (to 500, 300 or 200 characters) before it was masked: a
    secret the cut fell in was no longer recognised, and all but its end was shown."""
    hide(TOKEN)
    c = PromHttp(
        "http://vm.example:8428",
        retry=RetryPolicy(attempts=1),
        transport=httpx.MockTransport(_pad_echo(pad, TOKEN)),
    )
    with pytest.raises(DxtError) as err:
        c.get_json("api/v1/status/buildinfo")
    assert TOKEN[:8] not in str(err.value), str(err.value)[-120:]
    from dxt_core.backends.collectd_es.connection import error_parts

    _, reason = error_parts(("E" * pad + " token=" + TOKEN).encode())
    assert TOKEN[:8] not in reason, reason[-80:]


def test_a_quoted_answer_is_masked_before_its_repr() -> None:
    """An answer that is not JSON was quoted as ``repr(bytes)``, which escapes a quote or a
    backslash of the password it echoes: masking no longer matched it."""
    password = "Zq7'quote\\SECRET"
    hide(password)
    answer = f'{{"status":"success","data":"{password}"'.encode()
    c = HttpClient(
        "http://kairos.example:8083",
        retry=RetryPolicy(attempts=1),
        transport=httpx.MockTransport(lambda req: httpx.Response(200, content=answer)),
    )
    with pytest.raises(SourceError) as err:
        c.get_json("api/v1/version")
    assert "not valid JSON" in str(err.value) and "quote" not in str(err.value), str(err.value)
    from dxt_core.backends.examon.decode import _loads_answer

    broken = b'{"queries":[{"results":[{"name":"' + password.encode() + b'", "values": [[1,}'
    with pytest.raises(SourceError) as err:
        _loads_answer(broken, "http://kairos.example:8083", "a window")
    assert "quote" not in str(err.value) and "SECRET" not in str(err.value), str(err.value)
    with pytest.raises(SourceError) as err:  # the stretch near the error, when nothing is masked
        _loads_answer(b'{"queries": [1, 2, }', "http://kairos.example:8083", "a window")
    assert "near b'" not in str(err.value) and "[1, 2, }" in str(err.value), str(err.value)


def test_a_jobs_url_with_a_query_is_refused_and_never_printed() -> None:
    """``--jobs-url http://h:5000/?token=...``: the token was dropped from the requests in
    silence, and the refill and refetch commands quoted it."""
    import argparse

    from dxt_core.backends.examon.connection import SPEC, ExamonConnection

    with pytest.raises(ConfigError) as err:
        ExamonConnection("http://kairos.example:8083", jobs_url=f"http://h:5000/?token={TOKEN}")
    assert "query" in str(err.value) and TOKEN not in str(err.value)
    args = argparse.Namespace(url="http://kairos.example:8083", user=None)
    for e in SPEC.extras:
        setattr(args, e.dest, None)
    args.conn_jobs_url = f"http://u:{PASSWORD}@h:5000/?token={TOKEN}"
    words = SPEC.cli_words(args)
    assert "http://h:5000/" in words and not any(TOKEN in w or "S3cr3t" in w for w in words)


def test_a_redirect_with_credentials_is_masked_in_httpx_log_lines(caplog) -> None:
    """A server redirecting to ``http://user:password@host/...``: httpx's own INFO line
    (``dxt -v``, an Airflow task's log) quoted the URL whole; only dxt_core's loggers were
    masked."""
    import dxt_core.http  # noqa: F401  (masks httpx's logger)

    where = "http://vmuser:Zq7REDIRsecret@other.example:8428/api/v1/export"
    with caplog.at_level("INFO", logger="httpx"):
        logging.getLogger("httpx").info('HTTP Request: GET %s "HTTP/1.1 200 OK"', where)
    assert "Zq7REDIRsecret" not in caplog.text and "http://vmuser:***@other" in caplog.text


def test_the_command_line_log_masks_tracebacks_too() -> None:
    """A record with ``exc_info`` (the Airflow plugin's, an unexpected error under -v): the
    message was masked, its traceback was not."""
    from dxt_core.cli import _LogFormat

    hide("Zq7SECRETpw")
    try:
        raise RuntimeError("login refused for Zq7SECRETpw")
    except RuntimeError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = _LogFormat("%(levelname)s %(message)s").format(record)
    assert "RuntimeError" in line and "Zq7SECRETpw" not in line, line


def test_a_dxt_core_log_line_with_a_traceback_masks_the_traceback(caplog) -> None:
    """``log.warning(..., exc_info=True)`` (the Airflow plugin's listener): the message was
    masked, the traceback a handler formats was not."""
    from dxt_core.masking import logger

    hide("Zq7TRACEsecret")
    with caplog.at_level("WARNING", logger="dxt_core.test"):
        try:
            raise RuntimeError("refused Zq7TRACEsecret")
        except RuntimeError:
            logger("dxt_core.test").warning("could not note it", exc_info=True)
    text = logging.Formatter().format(caplog.records[-1])
    assert "RuntimeError" in text and "Zq7TRACEsecret" not in text, text


def test_a_connection_repr_shows_no_password_a_url_holds() -> None:
    """``repr`` of a connection made from an Airflow connection whose host held
    ``user:password@`` (a notebook's variable view, a debugger, a log of the object) showed
    the URL whole; ``password`` alone was kept out."""
    from dxt_core.backends.examon.connection import ExamonConnection
    from dxt_core.backends.prometheus.connection import SPEC

    prom = SPEC.from_fields(conn_id="c", host="admin:Zq7SECRETpw@h.example")
    examon = ExamonConnection(
        "http://a:Zq7SECRETpw@k.example:8083", jobs_url="http://b:Zq7SECRETpw@k.example:5000"
    )
    for conn in (prom, examon):
        assert "Zq7SECRETpw" not in repr(conn) and "k.example" in repr(examon), repr(conn)
    assert repr(examon).startswith("ExamonConnection(url='http://k.example:8083', user=None")


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        (["--passwd", "Zq7SECRETpw"], "unrecognized arguments: --passwd ***"),
        (["--token", "Zq7SECRETpw"], "unrecognized arguments: --token ***"),
        (["--p=Zq7SECRETpw"], "ambiguous option: --p=*** could match"),
    ],
)
def test_a_mistyped_password_option_is_not_repeated(capsys, typed, said) -> None:
    """argparse repeats what it could not take: a mistyped ``--passwd <the password>`` or an
    ambiguous ``--p=<the password>`` put the password on stderr."""
    from dxt_core.cli import main

    argv = ["extract", "examon", "--url", "http://kairos.example:8083", "--archive", "/nowhere"]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--start-day", "2024-01-01", *typed])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and "Zq7SECRETpw" not in err, err


@pytest.mark.parametrize(
    ("form", "user", "proxy_password", "secret"),
    [
        ("http://puser:Pr0xy-Pass%3Bword@", "puser", "Pr0xy-Pass;word", "Pr0xy-Pass;word"),
        # no scheme: httpx and botocore take it as http:// (it was not masked)
        ("puser:N0-scheme-pw@", "puser", "N0-scheme-pw", "N0-scheme-pw"),
        # a token alone as the user part (it was registered nowhere)
        ("http://T0ken-al0ne-42@", "T0ken-al0ne-42", "", "T0ken-al0ne-42"),
    ],
    ids=["user-password", "no-scheme", "token-only"],
)
def test_a_proxy_that_quotes_its_credentials_shows_them_masked(
    monkeypatch, form: str, user: str, proxy_password: str, secret: str
) -> None:
    """HTTP_PROXY with a user and password: the client sends them to the proxy
    (``Proxy-Authorization``); a proxy whose error page quotes the password bare (not in a
    URL, not after a header name) reached the error unmasked. A real proxy process is not
    needed: a real socket server stands as the proxy and answers as a refusing one."""
    import http.server
    import threading

    seen: list[str] = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            auth = self.headers.get("Proxy-Authorization", "")
            seen.append(auth)
            user, _, password = base64.b64decode(auth.split()[-1]).decode().partition(":")
            body = f"upstream refused for user {user} (password {password})".encode()
            self.send_response(502)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        port = server.server_address[1]
        monkeypatch.setenv("HTTP_PROXY", f"{form}127.0.0.1:{port}")
        c = HttpClient(
            "http://kairos.example:8083",
            retry=RetryPolicy(attempts=1, backoff_s=0, jitter=0),
            sleep=lambda s: None,
        )
        with pytest.raises(DxtError) as err:
            c.get_json("api/v1/version")
    finally:
        server.shutdown()
        server.server_close()
    assert seen and seen[0] == "Basic " + _basic(user, proxy_password)  # it went there
    text = str(err.value)
    assert secret not in text and "upstream refused for user " in text, text
    if proxy_password:
        assert f"upstream refused for user {user} (password ***)" in text, text


def test_a_secret_quoted_in_a_query_or_a_form_is_masked_in_its_encoded_forms() -> None:
    """An error or a log line quoting a URL whose query holds the password, or a form body:
    ``pa ss/w0rd!`` is ``pa%20ss%2Fw0rd%21`` there (or ``pa+ss%2Fw0rd%21``), which the
    bare form does not match; and with an empty user name, the Basic-auth form too."""
    hide("pa ss/w0rd!")
    for text in (
        "GET http://h/q?token=pa%20ss%2Fw0rd%21&x=1 failed",
        "body: token=pa+ss%2Fw0rd%21",
    ):
        assert "w0rd" not in scrub(text) and "***" in scrub(text), scrub(text)
    hide("longsecret-K2", user="")
    basic = base64.b64encode(b":longsecret-K2").decode()
    assert basic not in scrub(f"the proxy said: bad credentials {basic}")
