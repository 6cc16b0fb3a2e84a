// Translation unit that carries the shared precompiled torch header.
