"""A real MQTT broker (Debian's ``mosquitto``) on a free loopback port.

Loaded as a pytest plugin from tests/conftest.py. Tests that ask for
``mqtt_broker`` skip when ``/usr/sbin/mosquitto`` or ``paho-mqtt`` is
missing. Readiness is a connection the broker accepts, not a delay to guess.
The streamz compat harness (tests/compat) starts one the same way for
streamz's own MQTT round trip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import stop_process

__all__ = ["MOSQUITTO", "MqttBroker", "mqtt_broker", "start_broker"]

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MqttBroker:
    """One mosquitto process listening on 127.0.0.1, anonymous clients allowed."""

    host = "127.0.0.1"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        conf = directory / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                        "persistence false\n")
        self._log_path = directory / "mosquitto.log"
        self._log = open(self._log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([MOSQUITTO, "-c", str(conf)],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        for _ in range(400):  # bounded: about 20 s of a starting process
            if self.process.poll() is not None:
                raise RuntimeError("mosquitto exited:\n"
                                   + self._log_path.read_text(errors="replace"))
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)  # polling a starting process, not timing a test
        self.stop()
        raise RuntimeError("mosquitto did not accept connections:\n"
                           + self._log_path.read_text(errors="replace"))

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


def start_broker(directory: Path) -> MqttBroker:
    """A started broker, or a skip when mosquitto or paho-mqtt is missing."""
    pytest.importorskip("paho.mqtt.client")
    if not Path(MOSQUITTO).exists():
        pytest.skip("needs mosquitto (apt-get install mosquitto)")
    return MqttBroker(directory)


@pytest.fixture(scope="session")
def mqtt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttBroker]:
    """The session's MQTT broker, stopped at the end of the session."""
    broker = start_broker(tmp_path_factory.mktemp("mqtt"))
    try:
        yield broker
    finally:
        broker.stop()
