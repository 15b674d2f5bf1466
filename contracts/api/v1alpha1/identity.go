package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// Key is the identity as one comparable string: the UUID (lower case), the
// serial and the sorted, de-duplicated MACs (lower case). Discovery compares
// identities by it, and MachineName hashes it.
func (id MachineIdentity) Key() string {
	macs := slices.Clone(id.MACAddresses)
	for i := range macs {
		macs[i] = strings.ToLower(macs[i])
	}

	slices.Sort(macs)

	return strings.ToLower(id.UUID) + "|" + id.Serial + "|" + strings.Join(slices.Compact(macs), ",")
}

// MachineName is the deterministic name of the TalosMachine of identity id in
// cluster: the cluster's name (cut to fit a 253-character name) and the first
// ten hex digits of the identity key's SHA-256. Discovery and `ichor init`
// both name machines with it, so a scan finds the machine init created.
func MachineName(cluster string, id MachineIdentity) string {
	sum := sha256.Sum256([]byte(id.Key()))

	const maxPrefix = 253 - 1 - 10
	if len(cluster) > maxPrefix {
		cluster = cluster[:maxPrefix]
	}

	return strings.TrimRight(cluster, "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}
