package ui

import "testing"

func TestForgeLinks(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct{ repo, file, commit string }{
		{"https://github.com/acme/infra.git", "https://github.com/acme/infra/blob/" + rev + "/clusters/a%20b.yaml#L7", "https://github.com/acme/infra/commit/" + rev},
		{"git@github.com:acme/infra.git", "https://github.com/acme/infra/blob/" + rev + "/clusters/a%20b.yaml#L7", "https://github.com/acme/infra/commit/" + rev},
		{"ssh://git@github.example.com:2222/acme/infra", "https://github.example.com/acme/infra/blob/" + rev + "/clusters/a%20b.yaml#L7", "https://github.example.com/acme/infra/commit/" + rev},
		{"https://user:pw@gitlab.com/group/sub/infra.git", "https://gitlab.com/group/sub/infra/-/blob/" + rev + "/clusters/a%20b.yaml#L7", "https://gitlab.com/group/sub/infra/-/commit/" + rev},
		{"https://codeberg.org/acme/infra", "https://codeberg.org/acme/infra/src/commit/" + rev + "/clusters/a%20b.yaml#L7", "https://codeberg.org/acme/infra/commit/" + rev},
		{"https://gitea.internal/acme/infra.git", "https://gitea.internal/acme/infra/src/commit/" + rev + "/clusters/a%20b.yaml#L7", "https://gitea.internal/acme/infra/commit/" + rev},
		{"git://127.0.0.1:9418/repo.git", "", ""},
		{"https://git.example.com/acme/infra.git", "", ""},
		{"/srv/manifests", "", ""},
		{"https://github.com/acme", "", ""},
		{"javascript:alert(1)//github.com/a/b", "", ""},
	} {
		f := forgeOf(c.repo)
		if got := f.fileLink(rev, "clusters/a b.yaml", 7); got != c.file {
			t.Errorf("%s: file link %q, want %q", c.repo, got, c.file)
		}
		if got := f.commitLink(rev); got != c.commit {
			t.Errorf("%s: commit link %q, want %q", c.repo, got, c.commit)
		}
	}
	gh := forgeOf("https://github.com/acme/infra")
	if got := gh.fileLink("sha256:abc", "a.yaml", 1); got != "" {
		t.Errorf("a directory source's content hash links %q", got)
	}
	if got := gh.fileLink(rev, "a.yaml", 0); got != "https://github.com/acme/infra/blob/"+rev+"/a.yaml" {
		t.Errorf("a problem without a line links %q", got)
	}
}
