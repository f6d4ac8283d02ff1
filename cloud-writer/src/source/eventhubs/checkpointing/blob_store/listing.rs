//! The answer of List Blobs (`restype=container&comp=list&include=metadata`): each blob's
//! name, ETag, last modification and metadata, and the marker of the next page
//! (learn.microsoft.com/rest/api/storageservices/list-blobs).

use std::collections::HashMap;

use quick_xml::Reader;
use quick_xml::events::Event;

/// One blob of the listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedBlob {
    /// Full name, e.g. `ns/hub/$default/checkpoint/0`.
    pub name: String,
    /// ETag, quoted as the `ETag` header gives it (listings of some versions leave the
    /// quotes out).
    pub etag: Option<String>,
    /// `Last-Modified`, an HTTP date.
    pub last_modified: Option<String>,
    /// Metadata, names in lower case.
    pub metadata: HashMap<String, String>,
}

/// One page of the listing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The blobs of this page.
    pub blobs: Vec<ListedBlob>,
    /// Where the next page starts; `None` on the last one.
    pub next_marker: Option<String>,
}

/// The listing is not the XML List Blobs answers with.
#[derive(Debug, thiserror::Error)]
#[error("the blob listing is not List Blobs XML: {0}")]
pub struct ListingError(String);

/// Parses one page of List Blobs XML.
pub fn parse(xml: &str) -> Result<Page, ListingError> {
    let mut reader = Reader::from_str(xml);
    let mut page = Page::default();
    // The open elements, outermost first.
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut blob = ListedBlob::default();
    loop {
        match reader
            .read_event()
            .map_err(|e| ListingError(e.to_string()))?
        {
            Event::Start(start) => {
                let name = String::from_utf8_lossy(start.name().as_ref()).into_owned();
                if name == "Blob" {
                    blob = ListedBlob::default();
                }
                path.push(name);
                text.clear();
            }
            Event::Text(t) => {
                text.push_str(&t.decode().map_err(|e| ListingError(e.to_string()))?);
            }
            Event::CData(t) => {
                text.push_str(&t.decode().map_err(|e| ListingError(e.to_string()))?);
            }
            Event::GeneralRef(r) => {
                if let Some(c) = r
                    .resolve_char_ref()
                    .map_err(|e| ListingError(e.to_string()))?
                {
                    text.push(c);
                } else {
                    let name = r.decode().map_err(|e| ListingError(e.to_string()))?;
                    let resolved = quick_xml::escape::resolve_predefined_entity(&name)
                        .ok_or_else(|| ListingError(format!("unknown entity &{name};")))?;
                    text.push_str(resolved);
                }
            }
            Event::End(_) => {
                let value = std::mem::take(&mut text);
                let parents: Vec<&str> = path.iter().map(String::as_str).collect();
                match parents.as_slice() {
                    [.., "Blob", "Name"] => blob.name = value,
                    [.., "Blob", "Properties", "Etag"] => blob.etag = Some(quoted(value)),
                    [.., "Blob", "Properties", "Last-Modified"] => {
                        blob.last_modified = Some(value);
                    }
                    [.., "Blob", "Metadata", key] => {
                        blob.metadata.insert(key.to_lowercase(), value);
                    }
                    [.., "Blobs", "Blob"] => page.blobs.push(std::mem::take(&mut blob)),
                    ["EnumerationResults", "NextMarker"] if !value.is_empty() => {
                        page.next_marker = Some(value);
                    }
                    _ => {}
                }
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if path.is_empty() {
        Ok(page)
    } else {
        Err(ListingError(format!("unclosed elements {path:?}")))
    }
}

/// `etag` in quotes, as an HTTP header carries it.
fn quoted(etag: String) -> String {
    if etag.starts_with('"') || etag.starts_with("W/") {
        etag
    } else {
        format!("\"{etag}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example answer of the List Blobs reference page (version 2017-04-17 and later),
    /// cut to the elements the store reads, with a metadata entry as the Event Hubs SDKs
    /// write it.
    #[test]
    fn the_reference_example_parses() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://myaccount.blob.core.windows.net/" ContainerName="mycontainer">
  <Prefix>ns/hub/$default/ownership/</Prefix>
  <MaxResults>5000</MaxResults>
  <Blobs>
    <Blob>
      <Name>ns/hub/$default/ownership/0</Name>
      <Properties>
        <Creation-Time>Wed, 09 Sep 2009 09:20:02 GMT</Creation-Time>
        <Last-Modified>Wed, 09 Sep 2009 09:20:02 GMT</Last-Modified>
        <Etag>&quot;0x8CBFF45D8A29A19&quot;</Etag>
        <Content-Length>0</Content-Length>
        <BlobType>BlockBlob</BlobType>
      </Properties>
      <Metadata>
        <ownerid>replica-a</ownerid>
      </Metadata>
    </Blob>
    <Blob>
      <Name>ns/hub/$default/ownership/1</Name>
      <Properties><Etag>0x8CBFF45D8A29A1A</Etag></Properties>
      <Metadata />
    </Blob>
  </Blobs>
  <NextMarker>2!88!MDAwMDIz</NextMarker>
</EnumerationResults>"#;
        let page = parse(xml).unwrap();
        assert_eq!(page.next_marker.as_deref(), Some("2!88!MDAwMDIz"));
        assert_eq!(page.blobs.len(), 2);
        let first = &page.blobs[0];
        assert_eq!(first.name, "ns/hub/$default/ownership/0");
        assert_eq!(first.etag.as_deref(), Some("\"0x8CBFF45D8A29A19\""));
        assert_eq!(
            first.last_modified.as_deref(),
            Some("Wed, 09 Sep 2009 09:20:02 GMT")
        );
        assert_eq!(first.metadata["ownerid"], "replica-a");
        assert!(page.blobs[1].metadata.is_empty());
        assert_eq!(page.blobs[1].etag.as_deref(), Some("\"0x8CBFF45D8A29A1A\""));
    }

    #[test]
    fn the_last_page_has_no_marker() {
        let xml = "<EnumerationResults><Blobs /><NextMarker /></EnumerationResults>";
        assert_eq!(parse(xml).unwrap(), Page::default());
        assert!(parse("<EnumerationResults><Blobs>").is_err());
    }
}
