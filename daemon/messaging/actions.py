"""The messaging actions on the gate."""

from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.kernel.scopes import Scope

SEND = Action("message.send", Scope.MESSAGE, Tier.CARD, mutates=True, humans=False)
STATUS = Action("message.status", Scope.MESSAGE, Tier.READ, humans=False)
LIST = Action("messages.list", None, Tier.HUMAN)
