"use strict";
// The Klavis emulator does not install md-to-pdf (and puppeteer with it): see package.json.
exports.mdToPdf = async function mdToPdf() {
  throw new Error(
    "creating a PDF from markdown is not available in the Klavis emulator " +
      "(md-to-pdf and puppeteer are not installed); the Klavis service has it"
  );
};
