"""The placement queue: gangs that did not fit at admission wait, gated, for a good placement.

Why a queue at all: a gang admitted "unplaced" when the cluster is busy is later bound by
the scheduler wherever there is room, topology-blind, or half of it is. With
``placement.whenFull: wait`` its pods are admitted with the scheduling gate
``gputopo.io/placement`` instead (:mod:`webhook.placement.step`); this package releases them:

* :mod:`webhook.queue.gangs` — gated pods → waiting gangs, in arrival order (pure data);
* :mod:`webhook.queue.placer` — one pass: place every gang that fits now, oldest first, with
  backfill and a starvation guard, through the same solve + compare-and-swap reservation as
  admission (:class:`webhook.placement.reserve.GangReserver`); write each pod's slot, then
  lift the gates; after ``maxWaitSeconds`` lift them unplaced;
* :mod:`webhook.queue.lease` — one active queue among the webhook replicas (a
  ``coordination.k8s.io`` Lease);
* :mod:`webhook.queue.runner` — the loop ``gputopo serve`` starts on a live cluster;
* :mod:`webhook.queue.commands` — ``gputopo queue``: the waiting gangs and why not now.

See docs/queue.md.
"""
