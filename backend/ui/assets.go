package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assetFiles embed.FS

// asset is one embedded file, served under a name that carries a hash of
// its content (app.3f2a9c1b04de.css), so that it can be cached for good.
type asset struct {
	name        string
	contentType string
	body        []byte
	etag        string
}

// assetURLs are the URLs of the assets that every page links.
type assetURLs struct {
	CSS, JS, Icon string
}

var assets = loadAssets()

type assetSet struct {
	byName map[string]*asset
	urls   assetURLs
}

func loadAssets() assetSet {
	set := assetSet{byName: map[string]*asset{}}
	types := map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
	urls := map[string]string{}
	err := fs.WalkDir(assetFiles, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		hash := hex.EncodeToString(sum[:6])
		base, ext := path.Base(p), path.Ext(p)
		name := strings.TrimSuffix(base, ext) + "." + hash + ext
		set.byName[name] = &asset{name: name, contentType: types[ext], body: b, etag: `"` + hash + `"`}
		urls[base] = "/assets/" + name
		return nil
	})
	if err != nil {
		panic("ui: embedded assets: " + err.Error())
	}
	set.urls = assetURLs{CSS: urls["app.css"], JS: urls["app.js"], Icon: urls["icon.svg"]}
	if set.urls.CSS == "" || set.urls.JS == "" || set.urls.Icon == "" {
		panic("ui: embedded assets: app.css, app.js or icon.svg is missing")
	}
	return set
}

// serveAsset serves an embedded asset by its hashed name, cacheable for a
// year: a new build that changes it changes its name.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	a := assets.byName[r.PathValue("name")]
	if a == nil || a.contentType == "" {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "no such asset", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("ETag", a.etag)
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Write(a.body)
}
