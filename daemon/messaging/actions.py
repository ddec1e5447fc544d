"""The messaging actions on the gate."""

from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.kernel.scopes import Scope

# an admitted message, its held id and its card are queued on the call and land with the
# record; delivery starts after the commit
SEND = Action("message.send", Scope.MESSAGE, Tier.CARD, humans=False)
STATUS = Action("message.status", Scope.MESSAGE, Tier.READ, humans=False)
LIST = Action("messages.list", None, Tier.HUMAN)
