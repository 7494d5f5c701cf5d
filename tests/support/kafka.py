"""The tests' private Kafka-wire broker (Tansu): the one ``conveyor dev broker kafka`` starts."""

from conveyor.dev.kafka import TansuServer, tansu_binary

__all__ = ["TansuServer", "tansu_binary"]
