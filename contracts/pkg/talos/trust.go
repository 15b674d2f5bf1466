package talos

import (
	"bytes"
	"sync"
)

// The process-wide trust of a CA rotation (architecture, "Backup, recovery,
// certificates": the controller's own client trusts the new CA ahead of the
// switch). While a rotation runs, the nodes of a cluster present
// certificates of the bundle's Talos API CA or of the one it rotates from or
// to; every Dial with that bundle trusts both. Entries are keyed by the
// bundle's CA certificate and replaced whenever the bundle Secret is read
// (machinestate.LoadBundle calls Accept), so a finished rotation leaves none.
var trust = struct {
	sync.RWMutex
	extra map[string][][]byte
}{extra: map[string][][]byte{}}

// Accept records the Talos API CA certificates (PEM) the nodes of the
// cluster whose bundle CA is issuing accept beside it; none forgets them.
func Accept(issuing []byte, accepted []string) {
	key := string(bytes.TrimSpace(issuing))

	trust.Lock()
	defer trust.Unlock()

	if len(accepted) == 0 {
		delete(trust.extra, key)

		return
	}

	list := make([][]byte, 0, len(accepted))
	for _, a := range accepted {
		list = append(list, []byte(a))
	}

	trust.extra[key] = list
}

// acceptedBeside is what Accept recorded for issuing.
func acceptedBeside(issuing []byte) [][]byte {
	trust.RLock()
	defer trust.RUnlock()

	return trust.extra[string(bytes.TrimSpace(issuing))]
}
