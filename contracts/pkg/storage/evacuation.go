// Package storage holds the storage integration's pure decisions: whether a
// node's (or one disk's) evacuation is done, still waiting, or paused at its
// timeout (architecture, "Storage", layer 4).
package storage

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DefaultEvacuationTimeout is TalosStorage.spec.evacuationTimeout when it is empty.
const DefaultEvacuationTimeout = 30 * time.Minute

// Target is what is evacuated: a whole node, or one of its disks when Disk is set.
type Target struct {
	// Node is the storage system's node name (Longhorn's node object is named
	// after the Kubernetes Node).
	Node string
	// Disk is the storage system's disk ID (a replica's spec.diskID); empty means the whole node.
	Disk string
}

func (t Target) String() string {
	if t.Disk == "" {
		return "node " + t.Node
	}

	return "disk " + t.Disk + " of node " + t.Node
}

// Replica is one replica as the caller read it: for Longhorn a
// replicas.longhorn.io object, its spec.volumeName, spec.nodeID and spec.diskID.
type Replica struct {
	Name   string
	Volume string
	Node   string
	Disk   string
}

// Phase is where an evacuation stands.
type Phase string

// The phases of an evacuation.
const (
	// EvacuationDone: no replica names the target; the drain may follow.
	EvacuationDone Phase = "Done"
	// EvacuationWaiting: replicas still name the target and the timeout has not passed.
	EvacuationWaiting Phase = "Waiting"
	// EvacuationPaused: the timeout passed with replicas still on the target.
	// The operation pauses; it never proceeds to drain.
	EvacuationPaused Phase = "Paused"
)

// Status is the decision, with the replicas still on the target and a message
// naming them.
type Status struct {
	Phase Phase
	// Remaining are the names of the replicas still on the target, sorted.
	Remaining []string
	// Volumes are the volumes those replicas belong to, sorted, without repeats.
	Volumes []string
	// Elapsed is the time since the evacuation started.
	Elapsed time.Duration
	// Message says what the evacuation waits for, or why it paused.
	Message string
}

// EvacuationStatus decides an evacuation of target from the replicas the
// storage system has (all of them, or those of the target's node), the time
// the evacuation was requested, now, and the timeout (zero means
// DefaultEvacuationTimeout).
//
// Done is an absence of objects, not a counter reaching zero: Longhorn's
// volume controller deletes a replica whose spec.evictionRequested is set once
// its volume has a healthy replica elsewhere
// (longhorn-manager controller/volume_controller.go,
// cleanupEvictionRequestedReplicas), and it has no "eviction done" status field.
func EvacuationStatus(target Target, replicas []Replica, started, now time.Time, timeout time.Duration) Status {
	if timeout <= 0 {
		timeout = DefaultEvacuationTimeout
	}

	var s Status

	for _, r := range replicas {
		if r.Node != target.Node || (target.Disk != "" && r.Disk != target.Disk) {
			continue
		}

		s.Remaining = append(s.Remaining, r.Name)

		if r.Volume != "" && !slices.Contains(s.Volumes, r.Volume) {
			s.Volumes = append(s.Volumes, r.Volume)
		}
	}

	slices.Sort(s.Remaining)
	slices.Sort(s.Volumes)

	s.Elapsed = max(now.Sub(started), 0)

	switch {
	case len(s.Remaining) == 0:
		s.Phase = EvacuationDone
		s.Message = fmt.Sprintf("no replica remains on %s", target)
	case s.Elapsed >= timeout:
		s.Phase = EvacuationPaused
		s.Message = fmt.Sprintf("the evacuation of %s did not finish within %s: %s still there (volumes %s); "+
			"the storage system moves a replica only when its volume has a healthy replica on another node, so check those volumes' health and "+
			"the other nodes' free space and schedulability",
			target, timeout, countReplicas(s.Remaining), list(s.Volumes))
	default:
		s.Phase = EvacuationWaiting
		s.Message = fmt.Sprintf("%s still on %s (volumes %s), %s of %s elapsed",
			countReplicas(s.Remaining), target, list(s.Volumes), s.Elapsed.Round(time.Second), timeout)
	}

	return s
}

func countReplicas(names []string) string {
	if len(names) == 1 {
		return "1 replica (" + names[0] + ")"
	}

	return fmt.Sprintf("%d replicas (%s)", len(names), list(names))
}

// list joins names, the first five and a count of the rest.
func list(names []string) string {
	if len(names) == 0 {
		return "unknown"
	}

	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}

	return strings.Join(names, ", ")
}
