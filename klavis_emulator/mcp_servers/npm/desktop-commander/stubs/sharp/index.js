"use strict";
// The Klavis emulator does not install sharp (libvips): see package.json.
throw new Error("sharp is not installed in the Klavis emulator");
