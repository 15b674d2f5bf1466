// Package ichorupgrade holds the tests of the TalosOperation reconciler's
// ichor operation (controller/internal/controller/operation, ichor.go) in a
// world of their own: a real API server, an OCI registry on loopback and a
// test Sigstore (contracts/pkg/installerimage/imagetest), and no Talos
// machines, which an Ichor upgrade does not touch.
package ichorupgrade
