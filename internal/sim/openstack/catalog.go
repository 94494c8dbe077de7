package openstack

// Catalog is what the cloud offers and never changes while it runs:
// flavors, images, networks and security groups. IDs left empty are derived
// from the names, so they are the same on every start.
type Catalog struct {
	Flavors        []Flavor
	Images         []Image
	Networks       []Network
	SecurityGroups []SecurityGroup
	// Zones are the availability zones a server may ask for; the first is
	// where a server lands when it names none.
	Zones []string
}

// Flavor is a machine size.
type Flavor struct {
	ID, Name  string
	VCPUs     int
	RAMMiB    int
	DiskGiB   int
	Ephemeral int
}

// Image is a bootable image.
type Image struct {
	ID, Name string
	MinDisk  int
}

// Network is a tenant network with one subnet, whose CIDR is the cloud's
// address block.
type Network struct {
	ID, Name string
	SubnetID string
}

// SecurityGroup is a named security group.
type SecurityGroup struct {
	ID, Name string
}

// DefaultCatalog is the catalog of a cloud configured with none: the flavors
// m1.small, m1.medium and m1.large, the images talos-1.12.6 and
// talos-1.11.5, the networks tenant-net and mgmt-net, the security groups
// default and talos, and the zones nova and az-2.
func DefaultCatalog() *Catalog {
	return &Catalog{
		Flavors: []Flavor{
			{Name: "m1.small", VCPUs: 2, RAMMiB: 4096, DiskGiB: 20},
			{Name: "m1.medium", VCPUs: 4, RAMMiB: 8192, DiskGiB: 40},
			{Name: "m1.large", VCPUs: 8, RAMMiB: 16384, DiskGiB: 80},
		},
		Images:         []Image{{Name: "talos-1.12.6", MinDisk: 10}, {Name: "talos-1.11.5", MinDisk: 10}},
		Networks:       []Network{{Name: "tenant-net"}, {Name: "mgmt-net"}},
		SecurityGroups: []SecurityGroup{{Name: "default"}, {Name: "talos"}},
		Zones:          []string{"nova", "az-2"},
	}
}

// fill derives the IDs left empty.
func (c *Catalog) fill() {
	for i := range c.Flavors {
		if c.Flavors[i].ID == "" {
			c.Flavors[i].ID = nameID("flavor:" + c.Flavors[i].Name)
		}
	}
	for i := range c.Images {
		if c.Images[i].ID == "" {
			c.Images[i].ID = nameID("image:" + c.Images[i].Name)
		}
	}
	for i := range c.Networks {
		if c.Networks[i].ID == "" {
			c.Networks[i].ID = nameID("network:" + c.Networks[i].Name)
		}
		if c.Networks[i].SubnetID == "" {
			c.Networks[i].SubnetID = nameID("subnet:" + c.Networks[i].Name)
		}
	}
	for i := range c.SecurityGroups {
		if c.SecurityGroups[i].ID == "" {
			c.SecurityGroups[i].ID = nameID("secgroup:" + c.SecurityGroups[i].Name)
		}
	}
	if len(c.Zones) == 0 {
		c.Zones = []string{"nova"}
	}
}

func (c *Catalog) flavor(id string) *Flavor {
	for i := range c.Flavors {
		if c.Flavors[i].ID == id {
			return &c.Flavors[i]
		}
	}
	return nil
}

func (c *Catalog) imageByID(id string) *Image {
	for i := range c.Images {
		if c.Images[i].ID == id {
			return &c.Images[i]
		}
	}
	return nil
}

func (c *Catalog) network(id string) *Network {
	for i := range c.Networks {
		if c.Networks[i].ID == id {
			return &c.Networks[i]
		}
	}
	return nil
}

func (c *Catalog) secGroupByName(name string) *SecurityGroup {
	for i := range c.SecurityGroups {
		if c.SecurityGroups[i].Name == name || c.SecurityGroups[i].ID == name {
			return &c.SecurityGroups[i]
		}
	}
	return nil
}

func (c *Catalog) zone(name string) bool {
	for _, z := range c.Zones {
		if z == name {
			return true
		}
	}
	return false
}
