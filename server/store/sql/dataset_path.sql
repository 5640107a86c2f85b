SELECT path, size_bytes FROM datasets WHERE sha256 = $1
