package sso

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Roles are the role names a RoleMap gives, lowest first.
var Roles = []string{"view", "edit", "admin"}

// AnyGroup is the key of a RoleMap's default: the role of a person in no
// mapped group.
const AnyGroup = "*"

// RoleMap maps the provider's groups to roles. A person gets the highest
// role of their groups; one in no mapped group gets the default (AnyGroup)
// when the map names one, and no access otherwise.
type RoleMap struct {
	groups   map[string]string
	fallback string
}

// ParseRoleMap parses "GROUP=ROLE,GROUP=ROLE,*=ROLE", or with a leading
// '@' the file that holds it (entries separated by commas or new lines,
// '#' starts a comment). Roles are view, edit and admin.
func ParseRoleMap(s string) (RoleMap, error) {
	src := "--oidc-role-map"
	if name, ok := strings.CutPrefix(s, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return RoleMap{}, fmt.Errorf("role map: %w", err)
		}
		s, src = string(b), name
	}
	m := RoleMap{groups: map[string]string{}}
	for n, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for entry := range strings.SplitSeq(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			group, role, ok := strings.Cut(entry, "=")
			group, role = strings.TrimSpace(group), strings.TrimSpace(role)
			where := fmt.Sprintf("%s:%d", src, n+1)
			switch {
			case !ok || group == "":
				return RoleMap{}, fmt.Errorf("%s: %q: want GROUP=ROLE", where, entry)
			case !slices.Contains(Roles, role):
				return RoleMap{}, fmt.Errorf("%s: %q: role %q is not one of view, edit, admin", where, entry, role)
			case group == AnyGroup && m.fallback != "", m.groups[group] != "":
				return RoleMap{}, fmt.Errorf("%s: group %q is mapped twice", where, group)
			case group == AnyGroup:
				m.fallback = role
			default:
				m.groups[group] = role
			}
		}
	}
	if len(m.groups) == 0 && m.fallback == "" {
		return RoleMap{}, fmt.Errorf("%s: maps no group to a role", src)
	}
	return m, nil
}

// Role returns the highest role of groups, or the default, or false when
// groups give none.
func (m RoleMap) Role(groups []string) (string, bool) {
	best := -1
	for _, g := range groups {
		if r, ok := m.groups[g]; ok {
			best = max(best, slices.Index(Roles, r))
		}
	}
	if best >= 0 {
		return Roles[best], true
	}
	return m.fallback, m.fallback != ""
}

// String returns the map in the form ParseRoleMap reads, groups sorted,
// the default last.
func (m RoleMap) String() string {
	var out []string
	for g, r := range m.groups {
		out = append(out, g+"="+r)
	}
	slices.Sort(out)
	if m.fallback != "" {
		out = append(out, AnyGroup+"="+m.fallback)
	}
	return strings.Join(out, ",")
}
