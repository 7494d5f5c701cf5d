"""The tests' private RabbitMQ node: the one ``conveyor dev broker rabbitmq`` starts."""

from conveyor.dev.rabbitmq import RabbitServer, rabbitmq_installed

__all__ = ["RabbitServer", "rabbitmq_installed"]
