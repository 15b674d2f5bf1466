package release

import (
	"errors"
	"testing"
)

func TestCheckPair(t *testing.T) {
	tests := []struct {
		talos, kube string
		want        error
	}{
		{"v1.14.1", "1.37.2", nil},
		{"v1.14.1", "1.32.0", nil},
		{"v1.14.1", "1.31.9", ErrIncompatiblePair},
		{"v1.14.1", "1.38.0", ErrIncompatiblePair},
		{"v1.12.0", "1.37.0", ErrIncompatiblePair},
		{"v9.99.0", "1.37.0", ErrIncompatiblePair},
		{"vX", "1.37.0", ErrInvalidVersion},
		{"v1.14.1", "latest", ErrInvalidVersion},
	}
	for _, tt := range tests {
		err := CheckPair(tt.talos, tt.kube)
		if (tt.want == nil) != (err == nil) || !errors.Is(err, tt.want) {
			t.Errorf("CheckPair(%s, %s) = %v, want %v", tt.talos, tt.kube, err, tt.want)
		}
	}
}

func TestTalosPath(t *testing.T) {
	tests := []struct {
		from, to string
		want     error
	}{
		{"v1.14.1", "v1.14.1", nil},
		{"v1.14.0", "v1.14.1", nil},
		{"v1.13.4", "v1.14.1", nil},
		{"v1.12.0", "v1.14.1", nil},            // Talos may skip minors within its bounds
		{"v1.11.5", "v1.14.1", ErrUpgradePath}, // below talos114.MinimumHostUpgradeVersion (1.12.0)
		{"v1.14.1", "v1.13.9", ErrDowngrade},
		{"v1.14.1", "v1.14.0", ErrDowngrade},
		{"v1.14.1", "v1.99.0", ErrUpgradePath}, // a minor machinery does not know
		{"v1.14.1", "bad", ErrInvalidVersion},
	}
	for _, tt := range tests {
		err := TalosPath(tt.from, tt.to)
		if (tt.want == nil) != (err == nil) || !errors.Is(err, tt.want) {
			t.Errorf("TalosPath(%s, %s) = %v, want %v", tt.from, tt.to, err, tt.want)
		}
	}
}

func TestKubernetesSkew(t *testing.T) {
	tests := []struct {
		from, to string
		want     error
	}{
		{"1.36.4", "1.36.5", nil},
		{"1.36.4", "1.37.0", nil},
		{"1.36.4", "v1.37.0", nil},
		{"1.35.0", "1.37.0", ErrKubernetesSkew},
		{"1.37.2", "2.0.0", ErrKubernetesSkew},
		{"1.37.2", "1.37.1", ErrDowngrade},
		{"1.37.2", "1.36.9", ErrDowngrade},
		{"1.37.2", "x", ErrInvalidVersion},
	}
	for _, tt := range tests {
		err := KubernetesSkew(tt.from, tt.to)
		if (tt.want == nil) != (err == nil) || !errors.Is(err, tt.want) {
			t.Errorf("KubernetesSkew(%s, %s) = %v, want %v", tt.from, tt.to, err, tt.want)
		}
	}
}

func TestCheckContract(t *testing.T) {
	if err := CheckContract("v1.14", "v1.14.1"); err != nil {
		t.Errorf("same minor: %v", err)
	}
	if err := CheckContract("v1.12", "v1.14.1"); err != nil {
		t.Errorf("older contract: %v", err)
	}
	if err := CheckContract("v1.15", "v1.14.1"); err == nil {
		t.Error("a contract newer than the running Talos must be refused")
	}
	if err := CheckContract("fourteen", "v1.14.1"); !errors.Is(err, ErrInvalidVersion) {
		t.Errorf("bad contract: %v", err)
	}
}

func TestCheckCiliumPair(t *testing.T) {
	tests := []struct {
		cilium, kube string
		untested     bool
		want         error
	}{
		{"v1.20.2", "1.36.4", false, nil},
		{"v1.20.2", "1.33.0", false, nil},
		{"v1.20.2", "1.37.2", true, nil}, // newer than tested: accepted, flagged
		{"v1.20.2", "1.32.9", false, ErrIncompatiblePair},
		{"v1.19.3", "1.31.0", false, nil},
		{"v1.19.3", "1.35.0", true, nil},
		{"v1.19.3", "1.30.5", false, ErrIncompatiblePair},
		{"v1.18.8", "1.33.0", false, ErrIncompatiblePair}, // not a version Ichor knows
		{"v1.20.2", "2.0.0", false, ErrIncompatiblePair},
		{"latest", "1.37.2", false, ErrInvalidVersion},
		{"v1.20.2", "x", false, ErrInvalidVersion},
	}
	for _, tt := range tests {
		untested, err := CheckCiliumPair(tt.cilium, tt.kube)
		if (tt.want == nil) != (err == nil) || !errors.Is(err, tt.want) || untested != tt.untested {
			t.Errorf("CheckCiliumPair(%s, %s) = %v, %v; want %v, %v", tt.cilium, tt.kube, untested, err, tt.untested, tt.want)
		}
	}
}

func TestCiliumVersionsHoldTheDefault(t *testing.T) {
	vs := CiliumVersions()
	if len(vs) == 0 || vs[len(vs)-1] != DefaultCiliumVersion {
		t.Fatalf("CiliumVersions() = %v: the default %s must be the newest", vs, DefaultCiliumVersion)
	}
	for _, v := range vs {
		if _, err := CheckCiliumPair(v, DefaultKubernetesVersion); err != nil {
			t.Errorf("embedded cilium %s refuses the default kubernetes %s: %v", v, DefaultKubernetesVersion, err)
		}
	}
}
