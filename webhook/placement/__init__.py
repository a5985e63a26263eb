"""Topology placement at admission: the pipeline step that places a gang (``step``), what a
slot writes into a pod (``mutations``), host ports of a gang (``ports``) and slots whose node
went away (``slot_repair``)."""
