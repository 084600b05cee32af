use super::*;
use crate::codebook::ChunkSize;
use crate::dataset::Rows;
use crate::layout::{LayoutOptions, compress_packed};

/// Ten rows of 4 bytes, their packed form, and their description.
fn group() -> (Codebook, crate::layout::Packed, GroupMeta, Vec<u8>) {
    let cb = Codebook::new(ChunkSize::Two, vec![0xff, 0, 0xff, 0], vec![0; 4]).unwrap();
    let data: Vec<u8> = (0..40u8).map(|i| if i % 2 == 1 { i } else { 0 }).collect();
    let packed =
        compress_packed(&cb, Rows::new(&data, 4).unwrap(), &LayoutOptions::default()).unwrap();
    let meta = GroupMeta::new("g", DType::U8, vec![10, 4], 10, 4, &data);
    (cb, packed, meta, data)
}

#[test]
fn a_group_in_pieces_is_the_group_at_once() {
    let (cb, packed, meta, _) = group();
    let mut whole = ContainerWriter::new(Vec::new()).unwrap();
    let data = GroupData::Packed {
        codebook: &cb,
        threshold: None,
        packed: packed.view(),
    };
    whole.add_group(meta.clone(), data).unwrap();
    let (whole, _) = whole.finish(&[Segment::Group(0)]).unwrap();

    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let offsets: Vec<u8> = packed
        .offsets
        .iter()
        .flat_map(|o| o.to_le_bytes())
        .collect();
    w.add_group_in_pieces(meta, &cb, None, GroupLayout::Coded(Layout::Packed), |s| {
        s.start(SectionKind::Flags)?;
        s.write(&packed.flags[..1])?;
        s.write(&packed.flags[1..])?;
        s.start(SectionKind::Offsets)?;
        for o in offsets.chunks(24) {
            s.write(o)?;
        }
        s.start(SectionKind::Payload)?;
        s.write(&packed.payload[..3])?;
        s.write(&packed.payload[3..])
    })
    .unwrap();
    let (pieces, _) = w.finish(&[Segment::Group(0)]).unwrap();
    assert!(pieces == whole);
}

#[test]
fn pieces_of_the_wrong_length_or_order_are_refused() {
    let (cb, packed, meta, _) = group();
    let offsets: Vec<u8> = packed
        .offsets
        .iter()
        .flat_map(|o| o.to_le_bytes())
        .collect();
    type Write<'a> = &'a dyn Fn(&mut GroupSections<'_, Vec<u8>>) -> Result<()>;
    let short_flags: Write = &|s| {
        s.start(SectionKind::Flags)?;
        s.write(&packed.flags[..1])?;
        s.start(SectionKind::Offsets)
    };
    let out_of_order: Write = &|s| {
        s.start(SectionKind::Flags)?;
        s.write(&packed.flags)?;
        s.start(SectionKind::Payload)
    };
    let missing_payload: Write = &|s| {
        s.start(SectionKind::Flags)?;
        s.write(&packed.flags)?;
        s.start(SectionKind::Offsets)?;
        s.write(&offsets)
    };
    let write_before_start: Write = &|s| s.write(&packed.flags);
    for (what, write) in [
        ("short flags", short_flags),
        ("out of order", out_of_order),
        ("missing payload", missing_payload),
        ("write before start", write_before_start),
    ] {
        let mut w = ContainerWriter::new(Vec::new()).unwrap();
        let e = w
            .add_group_in_pieces(
                meta.clone(),
                &cb,
                None,
                GroupLayout::Coded(Layout::Packed),
                write,
            )
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{what}");
    }
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let e = w
        .add_group_in_pieces(meta, &cb, None, GroupLayout::Raw, |_| Ok(()))
        .unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
}
