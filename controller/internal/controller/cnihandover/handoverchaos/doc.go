// Package handoverchaos holds the chaos test of the Cilium hand-over
// (package cnihandover): its own emulated cluster, whose hand-over no
// long-lived controller runs, so that each step of it is one reconcile in a
// controller process that then dies. It has no code of its own.
package handoverchaos
