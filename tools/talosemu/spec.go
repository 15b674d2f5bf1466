package talosemu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultTalosVersion is the Talos version an emulated machine boots unless its spec says otherwise.
// It is the tag of machinery v1.14.1 (m:gendata/data/tag).
const DefaultTalosVersion = "v1.14.1"

// DefaultSchematicID is the Image Factory ID of the schematic without customizations,
// reported when no schematic is given.
const DefaultSchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// DefaultPort is the Talos API port (m:constants/constants.go ApidPort).
const DefaultPort = 50000

// Role hints. A hint only describes what the machine is meant to become; the applied
// configuration decides the real machine type.
const (
	RoleHintNone         = ""
	RoleHintControlPlane = "controlplane"
	RoleHintWorker       = "worker"
)

// Disk types an emulated machine can have.
const (
	DiskNVMe   = "nvme"
	DiskVirtio = "virtio"
	DiskSATA   = "sata"
)

// Spec describes an emulated world: the machines and their defaults.
type Spec struct {
	// Subnet is where machine addresses are taken from, in order, when a machine has none.
	Subnet string `yaml:"subnet,omitempty"`
	// Port is the Talos API port of every machine; default 50000.
	Port int `yaml:"port,omitempty"`
	// ControlAddress is the listen address of the control API; default 127.0.0.1:0.
	ControlAddress string `yaml:"controlAddress,omitempty"`
	// Durations sets how long the emulated steps take.
	Durations Durations `yaml:"durations,omitempty"`
	// Machines lists the machines.
	Machines []MachineSpec `yaml:"machines"`
}

// Durations are the lengths of emulated steps. Zero values take the defaults of DefaultDurations.
type Durations struct {
	// Apply is how long an ApplyConfiguration call takes before it answers.
	Apply Duration `yaml:"apply,omitempty" json:"apply,omitempty"`
	// Install is how long the installing stage lasts after the first configuration.
	Install Duration `yaml:"install,omitempty" json:"install,omitempty"`
	// Reboot is how long a reboot lasts: the machine shows its shutdown stage for half of it
	// and does not answer for the other half.
	Reboot Duration `yaml:"reboot,omitempty" json:"reboot,omitempty"`
	// Boot is how long the booting stage lasts before running (or maintenance).
	Boot Duration `yaml:"boot,omitempty" json:"boot,omitempty"`
}

// DefaultDurations are short, so a test world moves quickly.
func DefaultDurations() Durations {
	return Durations{
		Apply:   Duration(0),
		Install: Duration(2 * time.Second),
		Reboot:  Duration(time.Second),
		Boot:    Duration(500 * time.Millisecond),
	}
}

func (d Durations) withDefaults() Durations {
	def := DefaultDurations()

	if d.Install == 0 {
		d.Install = def.Install
	}

	if d.Reboot == 0 {
		d.Reboot = def.Reboot
	}

	if d.Boot == 0 {
		d.Boot = def.Boot
	}

	return d
}

// Duration is a time.Duration written as a Go duration string ("1.5s") in YAML and JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	v, err := time.ParseDuration(node.Value)
	if err != nil {
		return fmt.Errorf("line %d: invalid duration %q: %w", node.Line, node.Value, err)
	}

	if v < 0 {
		return fmt.Errorf("line %d: negative duration %q", node.Line, node.Value)
	}

	*d = Duration(v)

	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("duration must be a string like \"1s\", got %s", b)
	}

	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: %w", s, err)
	}

	if v < 0 {
		return fmt.Errorf("negative duration %q", s)
	}

	*d = Duration(v)

	return nil
}

// MachineSpec describes one machine. Empty fields get deterministic defaults derived from
// the machine's name, so the same spec always yields the same hardware.
type MachineSpec struct {
	// Name identifies the machine in the control API and names its state directory.
	Name string `yaml:"name,omitempty"`
	// Address is the loopback address the machine listens on.
	Address string `yaml:"address,omitempty"`
	// Role is a hint: controlplane, worker or empty.
	Role string `yaml:"role,omitempty"`
	// TalosVersion is the version of the boot media (and of the first install).
	TalosVersion string `yaml:"talosVersion,omitempty"`
	// Schematic is the Image Factory schematic ID of the boot media.
	Schematic string `yaml:"schematic,omitempty"`
	// Hostname is the hostname reported before a configuration sets one.
	Hostname string `yaml:"hostname,omitempty"`
	// Identity is the SMBIOS identity.
	Identity Identity `yaml:"identity,omitempty"`
	// Disks are the block devices; default one 100 GiB NVMe disk.
	Disks []DiskSpec `yaml:"disks,omitempty"`
	// Links are the physical network links; default one.
	Links []LinkSpec `yaml:"links,omitempty"`
	// SecureBoot is whether the machine boots with SecureBoot (SecurityState).
	SecureBoot bool `yaml:"secureBoot,omitempty"`
}

// Identity is the SMBIOS identity of a machine.
type Identity struct {
	// UUID is the SMBIOS UUID. Absent means generated; an explicit empty string means the
	// machine reports no UUID. Two machines may be given the same UUID.
	UUID *string `yaml:"uuid,omitempty" json:"uuid"`
	// Serial is the SMBIOS serial number.
	Serial string `yaml:"serial,omitempty" json:"serial"`
	// Manufacturer is the SMBIOS manufacturer.
	Manufacturer string `yaml:"manufacturer,omitempty" json:"manufacturer"`
	// ProductName is the SMBIOS product name.
	ProductName string `yaml:"productName,omitempty" json:"productName"`
}

// DiskSpec describes a disk.
type DiskSpec struct {
	// Name is the kernel device name (nvme0n1, vda, sda); default from the type and position.
	Name string `yaml:"name,omitempty" json:"name"`
	// Type is nvme, virtio or sata; default nvme.
	Type string `yaml:"type,omitempty" json:"type"`
	// Size in bytes or with a binary suffix (100GiB, 512MiB); default 100GiB.
	Size string `yaml:"size,omitempty" json:"size"`
	// Model is the disk model.
	Model string `yaml:"model,omitempty" json:"model"`
	// Serial defaults to a generated value for nvme and sata, empty for virtio.
	Serial *string `yaml:"serial,omitempty" json:"serial"`
	// WWID defaults to a generated value for nvme and sata, empty for virtio.
	WWID *string `yaml:"wwid,omitempty" json:"wwid"`
}

// LinkSpec describes a physical network link.
type LinkSpec struct {
	// Name is the kernel link name; default enp0s<N>.
	Name string `yaml:"name,omitempty" json:"name"`
	// MAC is the permanent hardware address; default generated.
	MAC string `yaml:"mac,omitempty" json:"mac"`
}

// LoadSpec reads a YAML spec file. Unknown fields are errors.
func LoadSpec(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}

	spec, err := ParseSpec(b)
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", path, err)
	}

	return spec, nil
}

// ParseSpec decodes a YAML spec strictly and validates it.
func ParseSpec(b []byte) (*Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)

	var spec Spec

	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("malformed spec: %w", err)
	}

	if _, err := spec.resolve(); err != nil {
		return nil, err
	}

	return &spec, nil
}

// GenerateSpec returns a spec of n default machines with addresses from subnet. The first
// controlPlanes machines carry the controlplane hint, the rest the worker hint.
func GenerateSpec(n, controlPlanes int, subnet string) (*Spec, error) {
	if n < 1 {
		return nil, fmt.Errorf("--machines must be at least 1, got %d", n)
	}

	if controlPlanes < 0 || controlPlanes > n {
		return nil, fmt.Errorf("--controlplanes must be between 0 and %d, got %d", n, controlPlanes)
	}

	spec := &Spec{Subnet: subnet, Machines: make([]MachineSpec, n)}

	for i := range spec.Machines {
		spec.Machines[i].Name = fmt.Sprintf("machine-%d", i+1)

		if i < controlPlanes {
			spec.Machines[i].Role = RoleHintControlPlane
		} else if controlPlanes > 0 {
			spec.Machines[i].Role = RoleHintWorker
		}
	}

	if _, err := spec.resolve(); err != nil {
		return nil, err
	}

	return spec, nil
}

// hwSpec is the resolved, persisted description of a machine.
type hwSpec struct {
	Name         string   `json:"name"`
	Address      string   `json:"address"`
	Role         string   `json:"role"`
	TalosVersion string   `json:"talosVersion"`
	Schematic    string   `json:"schematic"`
	Hostname     string   `json:"hostname"`
	UUID         string   `json:"uuid"`
	Serial       string   `json:"serial"`
	Manufacturer string   `json:"manufacturer"`
	ProductName  string   `json:"productName"`
	Disks        []diskHW `json:"disks"`
	Links        []linkHW `json:"links"`
	Port         int      `json:"port"`
	SecureBoot   bool     `json:"secureBoot,omitempty"`
}

type diskHW struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Size   uint64 `json:"size"`
	Model  string `json:"model"`
	Serial string `json:"serial"`
	WWID   string `json:"wwid"`
}

type linkHW struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
}

func (spec *Spec) port() int {
	if spec.Port == 0 {
		return DefaultPort
	}

	return spec.Port
}

// resolve validates the spec and fills in every default.
//
//nolint:gocyclo,cyclop
func (spec *Spec) resolve() ([]hwSpec, error) {
	if len(spec.Machines) == 0 {
		return nil, errors.New("spec has no machines")
	}

	if spec.Port < 0 || spec.Port > 65535 {
		return nil, fmt.Errorf("port %d is out of range", spec.Port)
	}

	var (
		next   netip.Addr
		prefix netip.Prefix
	)

	if spec.Subnet != "" {
		var err error

		prefix, err = netip.ParsePrefix(spec.Subnet)
		if err != nil {
			return nil, fmt.Errorf("subnet %q: %w", spec.Subnet, err)
		}

		if !prefix.Addr().Is4() || !prefix.Addr().IsLoopback() {
			return nil, fmt.Errorf("subnet %q must be an IPv4 range inside 127.0.0.0/8", spec.Subnet)
		}

		prefix = prefix.Masked()
		next = prefix.Addr().Next()
	}

	out := make([]hwSpec, len(spec.Machines))
	names := map[string]int{}
	addrs := map[string]int{}

	for i, m := range spec.Machines {
		where := fmt.Sprintf("machines[%d]", i)

		hw := hwSpec{Name: m.Name, Role: m.Role, Port: spec.port(), SecureBoot: m.SecureBoot}
		if hw.Name == "" {
			hw.Name = fmt.Sprintf("machine-%d", i+1)
		}

		if !validName(hw.Name) {
			return nil, fmt.Errorf("%s: name %q may only contain a-z, 0-9, '-' and '.'", where, hw.Name)
		}

		if j, dup := names[hw.Name]; dup {
			return nil, fmt.Errorf("%s: name %q is already used by machines[%d]", where, hw.Name, j)
		}

		names[hw.Name] = i

		switch m.Role {
		case RoleHintNone, RoleHintControlPlane, RoleHintWorker:
		default:
			return nil, fmt.Errorf("%s (%s): role %q is not one of controlplane, worker or empty", where, hw.Name, m.Role)
		}

		if m.Address != "" {
			a, err := netip.ParseAddr(m.Address)
			if err != nil || !a.Is4() || !a.IsLoopback() {
				return nil, fmt.Errorf("%s (%s): address %q must be an IPv4 address inside 127.0.0.0/8", where, hw.Name, m.Address)
			}

			hw.Address = a.String()
		} else {
			if !next.IsValid() {
				return nil, fmt.Errorf("%s (%s): no address and no subnet to take one from", where, hw.Name)
			}

			for prefix.Contains(next) && (addrs[next.String()] > 0 || isBroadcast(prefix, next)) {
				next = next.Next()
			}

			if !prefix.Contains(next) || isBroadcast(prefix, next) {
				return nil, fmt.Errorf("subnet %s has no address left for %s (machines[%d])", spec.Subnet, hw.Name, i)
			}

			hw.Address = next.String()
			next = next.Next()
		}

		if j, dup := addrs[hw.Address]; dup {
			return nil, fmt.Errorf("%s (%s): address %s is already used by machines[%d]", where, hw.Name, hw.Address, j-1)
		}

		addrs[hw.Address] = i + 1

		hw.TalosVersion = m.TalosVersion
		if hw.TalosVersion == "" {
			hw.TalosVersion = DefaultTalosVersion
		}

		if !strings.HasPrefix(hw.TalosVersion, "v") {
			return nil, fmt.Errorf("%s (%s): talosVersion %q must look like v1.14.1", where, hw.Name, hw.TalosVersion)
		}

		hw.Schematic = m.Schematic
		if hw.Schematic == "" {
			hw.Schematic = DefaultSchematicID
		}

		hw.Hostname = m.Hostname
		if hw.Hostname == "" {
			hw.Hostname = "talos-" + seed(hw.Name, "host")[:3] + "-" + seed(hw.Name, "host")[3:6]
		}

		if m.Identity.UUID != nil {
			hw.UUID = *m.Identity.UUID
		} else {
			s := seed(hw.Name, "uuid")
			hw.UUID = fmt.Sprintf("%s-%s-4%s-8%s-%s", s[0:8], s[8:12], s[13:16], s[17:20], s[20:32])
		}

		hw.Serial = m.Identity.Serial
		if hw.Serial == "" {
			hw.Serial = "EMU" + strings.ToUpper(seed(hw.Name, "serial")[:9])
		}

		hw.Manufacturer = m.Identity.Manufacturer
		if hw.Manufacturer == "" {
			hw.Manufacturer = "Ichor Emulated Hardware"
		}

		hw.ProductName = m.Identity.ProductName
		if hw.ProductName == "" {
			hw.ProductName = nameTalosemu
		}

		disks, err := resolveDisks(hw.Name, m.Disks)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, hw.Name, err)
		}

		hw.Disks = disks

		links, err := resolveLinks(hw.Name, m.Links)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, hw.Name, err)
		}

		hw.Links = links
		out[i] = hw
	}

	return out, nil
}

func isBroadcast(prefix netip.Prefix, a netip.Addr) bool {
	if !prefix.IsValid() || prefix.Bits() >= 31 {
		return false
	}

	return !prefix.Contains(a.Next())
}

func resolveDisks(machine string, specs []DiskSpec) ([]diskHW, error) {
	if len(specs) == 0 {
		specs = []DiskSpec{{Type: DiskNVMe}}
	}

	counters := map[string]int{}
	seen := map[string]bool{}
	out := make([]diskHW, len(specs))

	for i, d := range specs {
		hw := diskHW{Type: d.Type, Model: d.Model}
		if hw.Type == "" {
			hw.Type = DiskNVMe
		}

		n := counters[hw.Type]
		counters[hw.Type]++

		genSerial := seed(machine, "disk", strconv.Itoa(i))

		switch hw.Type {
		case DiskNVMe:
			hw.Name = fmt.Sprintf("nvme%dn1", n)
			hw.Serial = "S" + strings.ToUpper(genSerial[:13])
			hw.WWID = "eui." + genSerial[:16]

			if hw.Model == "" {
				hw.Model = "Emulated NVMe SSD"
			}
		case DiskSATA:
			hw.Name = "sd" + driveLetters(n)
			hw.Serial = strings.ToUpper(genSerial[:12])
			hw.WWID = "naa.5" + genSerial[:15]

			if hw.Model == "" {
				hw.Model = "Emulated SATA SSD"
			}
		case DiskVirtio:
			hw.Name = "vd" + driveLetters(n)
		default:
			return nil, fmt.Errorf("disks[%d]: type %q is not one of nvme, virtio, sata", i, d.Type)
		}

		if d.Name != "" {
			hw.Name = d.Name
		}

		if seen[hw.Name] {
			return nil, fmt.Errorf("disks[%d]: device name %q is used twice", i, hw.Name)
		}

		seen[hw.Name] = true

		if d.Serial != nil {
			hw.Serial = *d.Serial
		}

		if d.WWID != nil {
			hw.WWID = *d.WWID
		}

		size := uint64(100 << 30)

		if d.Size != "" {
			var err error

			size, err = parseSize(d.Size)
			if err != nil {
				return nil, fmt.Errorf("disks[%d]: %w", i, err)
			}
		}

		hw.Size = size
		out[i] = hw
	}

	return out, nil
}

func resolveLinks(machine string, specs []LinkSpec) ([]linkHW, error) {
	if len(specs) == 0 {
		specs = []LinkSpec{{}}
	}

	out := make([]linkHW, len(specs))
	seen := map[string]bool{}

	for i, l := range specs {
		hw := linkHW(l)
		if hw.Name == "" {
			hw.Name = fmt.Sprintf("enp0s%d", i+1)
		}

		if seen[hw.Name] {
			return nil, fmt.Errorf("links[%d]: link name %q is used twice", i, hw.Name)
		}

		seen[hw.Name] = true

		if hw.MAC == "" {
			s := seed(machine, "mac", strconv.Itoa(i))
			// locally administered, unicast
			hw.MAC = "02:" + s[0:2] + ":" + s[2:4] + ":" + s[4:6] + ":" + s[6:8] + ":" + s[8:10]
		} else if _, err := parseMAC(hw.MAC); err != nil {
			return nil, fmt.Errorf("links[%d]: %w", i, err)
		}

		out[i] = hw
	}

	return out, nil
}

func parseMAC(s string) ([]byte, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return nil, fmt.Errorf("mac %q is not six colon-separated bytes", s)
	}

	out := make([]byte, 6)

	for i, p := range parts {
		b, err := hex.DecodeString(p)
		if err != nil || len(b) != 1 {
			return nil, fmt.Errorf("mac %q is not six colon-separated bytes", s)
		}

		out[i] = b[0]
	}

	return out, nil
}

func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
	}

	num, mult := strings.TrimSpace(s), uint64(1)

	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult

			break
		}
	}

	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("size %q is not a positive number of bytes (e.g. 100GiB)", s)
	}

	return v * mult, nil
}

// driveLetters names the n-th disk of a kind like the kernel: a..z, aa..zz.
func driveLetters(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz"

	if n < len(letters) {
		return letters[n : n+1]
	}

	return driveLetters(n/len(letters)-1) + letters[n%len(letters):n%len(letters)+1]
}

func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}

	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '.' {
			return false
		}
	}

	return true
}

func seed(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))

	return hex.EncodeToString(h[:])
}
