package machinestate

// DefaultWorkers is how many machines the per-machine reconcilers (the
// configuration and the lifecycle) work on at once when not told otherwise.
// Their steps wait on the network (a Talos dial, a node's answer, the
// workload cluster's API), not on the CPU: with one worker, a thousand
// machines each polled every few seconds form a queue in which a control
// plane waits minutes for its turn. Controller-runtime never reconciles one
// machine in two workers at once; what spans machines (a control plane's
// join and removal, a rollout) holds the cluster lock, a Lease written with
// optimistic concurrency, so it does not depend on there being one worker.
const DefaultWorkers = 8

// Workers is n, or DefaultWorkers when n is not positive.
func Workers(n int) int {
	if n <= 0 {
		return DefaultWorkers
	}

	return n
}
