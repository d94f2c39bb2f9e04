"""The algorithms. Each registers here, in one line; `marljax.algos.registry` looks them up."""

from marljax.algos import bc, happo, ippo, maicq, mappo, offline_q, pqn_vdn, qlearning, sable, sac, shaq, transf_qmix
from marljax.algos.registry import register

register(ippo.SPEC)
register(mappo.SPEC)
register(happo.SPEC)
register(pqn_vdn.SPEC)
register(qlearning.IQL)
register(qlearning.VDN)
register(qlearning.QMIX)
register(sac.ISAC)
register(sac.MASAC)
register(shaq.SPEC)
register(transf_qmix.SPEC)
register(sable.SPEC)
register(bc.SPEC)
register(offline_q.SPEC)
register(maicq.SPEC)
