"""The Spark source's ``kafka.*`` security options (issue 30): Spark's Kafka-source (Java)
names and aiokafka's, PEM files turned into a TLS context where each client is made, and
bad input refused at ``load()`` with an error naming the option and never its secret.

The PEM files are real (a throwaway CA and key from ``aiogroup.testing.secure``): the
context is built by the ssl module, not faked.
"""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pyarrow  # noqa: F401  (the spark extra: a missing install fails here)
import pytest
from cryptography.hazmat.primitives import serialization

from aiogroup._support.client_security import TlsFiles
from aiogroup.errors import ConfigurationError
from aiogroup.spark._consumers import new_consumer
from aiogroup.spark.options import parse_options
from aiogroup.testing.secure import SecureSetup

SECRET = "Spark-S3cret-4711"
BASE = {"kafka.bootstrap.servers": "localhost:9093", "kafka.group.id": "g", "subscribe": "t"}
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="alice" password="{SECRET}";'
)


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    """ca.pem, and broker.pem: a key and its certificate chain in one PEM file (the
    layout of a PEM keystore)."""
    return SecureSetup.create(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def encrypted(pem: SecureSetup) -> tuple[Path, Path]:
    """(certificate.pem, key.pem) with the key encrypted under SECRET."""
    blocks = pem.keystore_path.read_bytes().split(b"-----END PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(blocks[0] + b"-----END PRIVATE KEY-----\n", None)
    key_path = pem.directory / "client.key"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(SECRET.encode()),
        )
    )
    cert_path = pem.directory / "client.pem"
    cert_path.write_bytes(blocks[1])
    return cert_path, key_path


def parse(**extra: str) -> object:
    return parse_options({**BASE, **extra})


def test_spark_kafka_source_names_give_sasl_ssl_with_a_pem_truststore(pem: SecureSetup) -> None:
    """What a Spark Kafka-source user writes: the Java client's names."""
    options = parse_options(
        {
            **BASE,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS,
            "kafka.ssl.truststore.location": str(pem.ca_path),
            "kafka.ssl.truststore.type": "PEM",
        }
    )
    for kwargs in (
        options.group_consumer_kwargs(),
        options.reader_consumer_kwargs(),
        options.client_kwargs(),
    ):
        assert kwargs["security_protocol"] == "SASL_SSL"
        assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
        assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("alice", SECRET)
        assert "ssl_context" not in kwargs, "a context does not pickle: built where used"
    assert options.tls == TlsFiles(
        cafile=str(pem.ca_path), names=options.tls.names if options.tls else ()
    )
    context = options.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert pickle.loads(pickle.dumps(options)) == options
    # The consumer built from the options (driver or executor) carries a context.
    consumer = new_consumer(options, **options.reader_consumer_kwargs())
    assert isinstance(consumer.config.client_options["ssl_context"], ssl.SSLContext)


def test_aiokafka_names_with_mutual_tls_and_an_encrypted_key(
    pem: SecureSetup, encrypted: tuple[Path, Path]
) -> None:
    cert, key = encrypted
    options = parse_options(
        {
            **BASE,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.cafile": str(pem.ca_path),
            "kafka.ssl.certfile": str(cert),
            "kafka.ssl.keyfile": str(key),
            "kafka.ssl.password": SECRET,
            "kafka.ssl.check.hostname": "false",
        }
    )
    assert options.tls is not None
    assert (options.tls.certfile, options.tls.keyfile) == (str(cert), str(key))
    context = options.ssl_context()
    assert context is not None and not context.check_hostname
    assert "sasl_plain_password" not in options.group_consumer_kwargs()


def test_a_pem_keystore_holds_key_and_chain_in_one_file(pem: SecureSetup) -> None:
    options = parse_options(
        {
            **BASE,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": str(pem.ca_path),
            "kafka.ssl.truststore.type": "pem",
            "kafka.ssl.keystore.location": str(pem.keystore_path),
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    assert options.tls is not None and options.tls.certfile == str(pem.keystore_path)
    context = options.ssl_context()
    assert context is not None and not context.check_hostname


def test_tls_without_files_trusts_the_systems_cas() -> None:
    """As the Java client falls back to the JVM's trust store."""
    options = parse_options({**BASE, "kafka.security.protocol": "ssl"})
    assert options.tls == TlsFiles(names=options.tls.names if options.tls else ())
    context = options.ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert parse_options(BASE).ssl_context() is None  # PLAINTEXT: no TLS at all


def test_a_numeric_password_stays_a_string() -> None:
    options = parse_options(
        {
            **BASE,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.plain.username": "alice",
            "kafka.sasl.plain.password": "0123456",
        }
    )
    assert options.consumer_options["sasl_plain_password"] == "0123456"
    assert options.consumer_options["sasl_mechanism"] == "PLAIN"


def test_equal_options_give_equal_reader_pool_keys(pem: SecureSetup) -> None:
    """An executor reuses its consumer when the next task's options are the same: the
    TLS part of the key is the files, which compare equal (contexts never do)."""
    given = {**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.cafile": str(pem.ca_path)}
    assert parse_options(given).tls == parse_options(dict(given)).tls
    assert hash(parse_options(given).tls) == hash(parse_options(dict(given)).tls)


SASL_SSL = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS}


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol must be one of"),
        (
            {**SASL_SSL, "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"},
            "kafka.ssl.truststore.location: a JKS truststore (ssl.truststore.type defaults",
        ),
        (
            {
                **SASL_SSL,
                "kafka.ssl.truststore.location": "/x.p12",
                "kafka.ssl.truststore.type": "PKCS12",
            },
            "a PKCS12 truststore",
        ),
        ({**SASL_SSL, "kafka.ssl.truststore.type": "BCFKS"}, "kafka.ssl.truststore.type must"),
        (
            {**SASL_SSL, "kafka.ssl.keystore.location": "/ks.jks"},
            "kafka.ssl.keystore.location: a JKS keystore",
        ),
        (
            {**SASL_SSL, "kafka.ssl.keystore.password": SECRET},
            "kafka.ssl.keystore.password is not used with a PEM keystore",
        ),
        ({**SASL_SSL, "kafka.ssl.cafile": "/nonexistent/ca.pem"}, "kafka.ssl.cafile"),
        ({**SASL_SSL, "kafka.ssl.cafile": ""}, "kafka.ssl.cafile is empty"),
        (
            {
                **SASL_SSL,
                "kafka.ssl.cafile": "/a.pem",
                "kafka.ssl.truststore.location": "/b.pem",
                "kafka.ssl.truststore.type": "PEM",
            },
            "kafka.ssl.cafile and kafka.ssl.truststore.location both",
        ),
        ({**SASL_SSL, "kafka.ssl.keyfile": "/k.pem"}, "kafka.ssl.keyfile is set without"),
        ({**SASL_SSL, "kafka.ssl.key.password": SECRET}, "kafka.ssl.key.password is set without"),
        ({**SASL_SSL, "kafka.ssl.check.hostname": "maybe"}, "kafka.ssl.check.hostname must be"),
        (
            {**SASL_SSL, "kafka.ssl.endpoint.identification.algorithm": "http"},
            "kafka.ssl.endpoint.identification.algorithm must be https",
        ),
        ({**SASL_SSL, "kafka.ssl.provider": "SunJSSE"}, "kafka.ssl.provider is not supported"),
        ({"kafka.ssl.cafile": "/ca.pem"}, "kafka.ssl.cafile is set but kafka.security.protocol"),
        (
            {"kafka.sasl.mechanism": "PLAIN"},
            "kafka.sasl.mechanism is set but kafka.security.protocol is PLAINTEXT",
        ),
        ({"kafka.security.protocol": "SASL_SSL"}, "needs a username and password"),
        (
            {**SASL_SSL, "kafka.sasl.mechanism": "OAUTHBEARER"},
            "OAUTHBEARER is not supported by the source",
        ),
        ({**SASL_SSL, "kafka.sasl.mechanism": "SCRAM-MD5"}, "kafka.sasl.mechanism must be"),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.jaas.config": f'com.example.Login required password="{SECRET}";',
            },
            "kafka.sasl.jaas.config: login module 'com.example.Login' is not supported",
        ),
        (
            {**SASL_SSL, "kafka.sasl.plain.username": "bob"},
            "kafka.sasl.jaas.config and kafka.sasl.plain.username both",
        ),
    ],
)
def test_bad_security_options_fail_naming_the_option(extra: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_options({**BASE, **extra})
    assert named in str(caught.value)
    assert SECRET not in str(caught.value)


def test_unreadable_pem_files_fail_at_load_naming_the_option(
    pem: SecureSetup, encrypted: tuple[Path, Path]
) -> None:
    cert, key = encrypted
    base = {**BASE, **SASL_SSL}
    with pytest.raises(ConfigurationError, match=r"kafka\.ssl\.truststore\.location .*as PEM"):
        parse_options(
            {
                **base,
                "kafka.ssl.truststore.location": str(key.with_name("missing.pem")),
                "kafka.ssl.truststore.type": "PEM",
            }
        )
    not_pem = key.with_name("not.pem")
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ConfigurationError, match=r"kafka\.ssl\.cafile"):
        parse_options({**base, "kafka.ssl.cafile": str(not_pem)})
    with pytest.raises(ConfigurationError) as caught:
        parse_options(
            {
                **base,
                "kafka.ssl.cafile": str(pem.ca_path),
                "kafka.ssl.certfile": str(cert),
                "kafka.ssl.keyfile": str(key),
                "kafka.ssl.key.password": "not-" + SECRET,
            }
        )
    message = str(caught.value)
    assert "kafka.ssl.certfile/kafka.ssl.keyfile" in message and "kafka.ssl.key.password" in message
    assert SECRET not in message
