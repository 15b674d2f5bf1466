//go:build e2e_full

package e2e

import (
	"fmt"
	"testing"
)

// TestFullLossRecoveryRepeated runs the full-loss recovery nine more times
// (with TestFullLossRecovery, ten in e2e:full, as issue 23 asks), each in a
// world of its own on the same subnet, the previous one stopped.
func TestFullLossRecoveryRepeated(t *testing.T) {
	for i := range 9 {
		if !t.Run(fmt.Sprintf("run-%d", i+2), fullLossRecovery) {
			return
		}
	}
}
